-- Unit test of hooks/job_submit.lua (the thin default) and the module it
-- calls, hooks/juice_submit.lua, with a mock `slurm` table (Lua 5.1, as
-- Debian's job_submit_lua.so uses); then of a site's own job_submit.lua that
-- calls the module (test/site/job_submit.lua), and of the default script with
-- the module missing.
--   usage: lua5.1 test_job_submit.lua PATH [VECTORS]
-- VECTORS is the directory of requests.tsv (default: test/vectors beside the
-- hooks directory of PATH).
local passed, failed = 0, 0
local last_user_msg

slurm = {
	SUCCESS = 0, ERROR = -1, ESLURM_ACCESS_DENIED = 2002,
	NO_VAL = 4294967294,
	log_user = function(fmt, ...) last_user_msg = string.format(fmt, ...) end,
	log_info = function(fmt, ...) last_log = string.format(fmt, ...) end,
	log_error = function(fmt, ...) last_error = string.format(fmt, ...) end,
	log_debug = function() end,
}
-- The site policy the script reads: a file of the test's own.
JUICE_POLICY_FILE = os.tmpname()
os.remove(JUICE_POLICY_FILE)
-- The hooks' settings the module reads JUICE_LICENSES from: the test's own,
-- absent at first (licenses off).
JUICE_CONFIG_FILE = os.tmpname()
os.remove(JUICE_CONFIG_FILE)
-- slurmctld's /proc/self/status, from which the module learns SlurmUser (the
-- uid slurmctld runs as): real uid 4242, effective 4243.
JUICE_PROC_STATUS = os.tmpname()
do
	local f = assert(io.open(JUICE_PROC_STATUS, "w"))
	f:write("Name:\tslurmctld\nUid:\t4242\t4243\t4243\t4243\nGid:\t4242\t4242\t4242\t4242\n")
	f:close()
end
local base_path = package.path
dofile(arg[1])
-- The default script found the module beside itself.
juice = require("juice_submit")

local function check(cond, what)
	if cond then passed = passed + 1
	else failed = failed + 1; print("FAIL " .. what) end
end

-- spank_job_env as slurmctld gives it: a table indexed from 0.
local function env(list)
	local t = {}
	for i, v in ipairs(list) do t[i - 1] = v end
	return t
end

local function submit(spank, comment)
	local jd = { spank_job_env = spank and env(spank) or nil, comment = comment }
	last_user_msg = nil
	return slurm_job_submit(jd, {}, 1000), jd, last_user_msg
end

local R = "juice:v1:pool=test,gpus=2"
local RV = "juice:v1:pool=test,gpus=1,vram=1610612736"

-- Not a Juice job: untouched.
local rc, jd = submit(nil, nil)
check(rc == 0 and jd.admin_comment == nil and jd.comment == nil, "no spank env")
rc, jd = submit({ "OTHER=1", "_SLURM_SPANK_OPTION_x_y=1" }, "mine")
check(rc == 0 and jd.admin_comment == nil and jd.comment == "mine", "other env")
rc, jd = submit({}, "juice:v1:pool=evil,gpus=8")
check(rc == 0 and jd.admin_comment == nil and jd.comment == "juice:v1:pool=evil,gpus=8",
	"forged comment without request is left alone")

-- Juice jobs.
rc, jd = submit({ "JUICE_REQUEST=" .. R, "JUICE_POOL=test", "JUICE_GPU_COUNT=2" }, nil)
check(rc == 0 and jd.admin_comment == R and jd.comment == R, "request -> both comments")
rc, jd = submit({ "X=1", "JUICE_REQUEST=" .. RV, "JUICE_POOL=test", "JUICE_GPU_COUNT=1",
	"JUICE_VRAM=1610612736" }, "")
check(rc == 0 and jd.admin_comment == RV and jd.comment == RV, "vram request, empty comment")
rc, jd = submit({ "JUICE_REQUEST=" .. R }, "my own words")
check(rc == 0 and jd.admin_comment == R and jd.comment == "my own words", "user comment kept")
rc, jd = submit({ "JUICE_REQUEST=" .. R }, "juice:v1:pool=evil,gpus=8")
check(rc == 0 and jd.admin_comment == R and jd.comment == R, "forged comment replaced")
local pool63 = string.rep("a", 63)
rc, jd = submit({ "JUICE_REQUEST=juice:v1:pool=" .. pool63 .. ",gpus=8" }, nil)
check(rc == 0, "63-character pool")

-- Refused, with a message.
local bad = {
	"juice:v1:pool=test", "juice:v1:pool=test,gpus=0", "juice:v1:pool=test,gpus=02",
	"juice:v2:pool=test,gpus=1", "juice:v1:pool=-x,gpus=1", "juice:v1:pool=te st,gpus=1",
	"juice:v1:pool=test,gpus=2,vram=1", "juice:v1:pool=test,gpus=1,vram=0",
	"juice:v1:pool=test,gpus=1,vram=", "juice:v1:pool=test,gpus=1,x=1",
	"juice:v1:pool=" .. string.rep("a", 64) .. ",gpus=1", "juice:v1:pool=test,gpus=1\n",
	"", "juice:v1:pool=test,gpus=99999",
}
for _, r in ipairs(bad) do
	rc, jd, msg = submit({ "JUICE_REQUEST=" .. r }, nil)
	check(rc == slurm.ERROR and msg and msg:find("^juice: ") and jd.admin_comment == nil,
		"refused: " .. r)
end
local long = "juice:v1:pool=test,gpus=1" .. string.rep("0", 1100)
rc, jd, msg = submit({ "JUICE_REQUEST=" .. long }, nil)
check(rc == slurm.ERROR and msg and msg:find("1024") and jd.admin_comment == nil,
	"over 1024 bytes refused, not cut")
rc, jd, msg = submit({ "JUICE_REQUEST=" .. R, "JUICE_POOL=other" }, nil)
check(rc == slurm.ERROR and msg, "parts disagree")
rc, jd, msg = submit({ "JUICE_REQUEST=" .. R, "JUICE_VRAM=5" }, nil)
check(rc == slurm.ERROR and msg, "vram part without vram in request")
rc, jd, msg = submit({ "JUICE_REQUEST=" .. R, "JUICE_REQUEST=" .. RV }, nil)
check(rc == slurm.ERROR and msg, "two different requests")
rc, jd, msg = submit({ "JUICE_POOL=test" }, nil)
check(rc == slurm.ERROR and msg, "parts without request")

-- Modify.
local function modify(desc, admin_comment, uid)
	last_user_msg = nil
	return slurm_job_modify(desc, { job_id = 7, admin_comment = admin_comment }, {}, uid),
		last_user_msg
end
-- test/vectors/requests.tsv: every row through juice.parse_request, submitted
-- as JUICE_REQUEST, given as the user's comment and found in admin_comment.
local function unescape(s)
	local out, i = {}, 1
	while i <= #s do
		local c = s:sub(i, i)
		if c ~= "\\" then
			out[#out + 1] = c
			i = i + 1
		else
			local e = s:sub(i + 1, i + 1)
			if e == "\\" then out[#out + 1] = "\\"
			elseif e == "t" then out[#out + 1] = "\t"
			elseif e == "n" then out[#out + 1] = "\n"
			elseif e == "x" and s:sub(i + 2, i + 3):find("^%x%x$") then
				out[#out + 1] = string.char(tonumber(s:sub(i + 2, i + 3), 16))
				i = i + 2
			else
				return nil
			end
			i = i + 2
		end
	end
	return table.concat(out)
end

local function split_tabs(line)
	local f, start = {}, 1
	while true do
		local tab = line:find("\t", start, true)
		f[#f + 1] = line:sub(start, tab and tab - 1 or #line)
		if not tab then return f end
		start = tab + 1
	end
end

local vectors = arg[2] or ((arg[1]:match("^(.*)/") or ".") .. "/../test/vectors")
local tsv = io.open(vectors .. "/requests.tsv", "r")
check(tsv ~= nil, "cannot read " .. vectors .. "/requests.tsv")
local rows, kinds = 0, { ok = 0, none = 0, error = 0 }
local lineno = 0
for line in (tsv and tsv:lines() or function() end) do
	lineno = lineno + 1
	if line ~= "" and line:sub(1, 1) ~= "#" then
		rows = rows + 1
		local f = split_tabs(line)
		local input, want = unescape(f[1]), f[2]
		local where = string.format("requests.tsv:%d: %q", lineno, f[1])
		check(input ~= nil, where .. ": bad escape")
		input = input or ""
		local kind, a, b, c = juice.parse_request(input)
		kinds[want or "?"] = (kinds[want or "?"] or 0) + 1
		if want == "ok" and #f == 5 then
			local vram = c or "0"
			check(kind == "ok" and a == f[3] and b == tonumber(f[4]) and vram == f[5],
				string.format("%s: want ok %s %s %s, got %s %s %s %s", where, f[3], f[4], f[5],
					tostring(kind), tostring(a), tostring(b), tostring(c)))
			-- Submitted, with the parts the plugin sets: accepted as is.
			local parts = { "JUICE_REQUEST=" .. input, "JUICE_POOL=" .. f[3], "JUICE_GPU_COUNT=" .. f[4] }
			if f[5] ~= "0" then parts[#parts + 1] = "JUICE_VRAM=" .. f[5] end
			local rc, jd = submit(parts, nil)
			check(rc == 0 and jd.admin_comment == input and jd.comment == input, where .. ": submit accepted")
		elseif want == "none" and #f == 2 then
			check(kind == "none" and a == nil, where .. ": want none, got " .. tostring(kind) .. " " .. tostring(a))
			-- As JUICE_REQUEST it is still refused: the plugin never sets such a value.
			local rc, jd, msg = submit({ "JUICE_REQUEST=" .. input }, nil)
			check(rc == slurm.ERROR and msg and msg:find("^juice: ") and jd.admin_comment == nil,
				where .. ": refused as JUICE_REQUEST")
		elseif want == "error" and #f == 3 then
			check(kind == "error" and a == f[3],
				string.format("%s: want error %s, got %s %s", where, f[3], tostring(kind), tostring(a)))
			local rc, jd, msg = submit({ "JUICE_REQUEST=" .. input }, nil)
			local names = f[3] == "length" and msg and msg:find("more than the 1024", 1, true) or
				msg and msg:find("(bad " .. f[3] .. ")", 1, true)
			check(rc == slurm.ERROR and msg and msg:find("^juice: ") and names and jd.admin_comment == nil,
				where .. ": refused naming " .. f[3] .. ": " .. tostring(msg))
		else
			check(false, where .. ": bad expected columns")
		end
		-- As the user's own comment: a text that is not a request stays, one that
		-- starts like a request gives way to the job's real request.
		local rc, jd = submit({ "JUICE_REQUEST=" .. R }, input)
		if want == "none" and input ~= "" then
			check(rc == 0 and jd.comment == input and jd.admin_comment == R, where .. ": user comment kept")
		else
			check(rc == 0 and jd.comment == R and jd.admin_comment == R, where .. ": comment replaced")
		end
		-- In admin_comment: only a text that is not a request leaves the job open to edits.
		last_user_msg = nil
		local mrc = slurm_job_modify({ comment = "x" }, { job_id = 7, admin_comment = input }, {}, 1000)
		check(mrc == (want == "none" and 0 or slurm.ESLURM_ACCESS_DENIED), where .. ": modify")
	end
end
if tsv then tsv:close() end
check(rows > 0 and kinds.ok > 0 and kinds.none > 0 and kinds.error > 0, "requests.tsv: every kind of row")
print(string.format("requests.tsv: %d rows (%d ok, %d none, %d error)", rows, kinds.ok, kinds.none, kinds.error))

-- test/vectors/policy.tsv: every row through juice.parse_policy and
-- juice.check_policy, as reconcile/policy's test does.
local ptsv = io.open(vectors .. "/policy.tsv", "r")
check(ptsv ~= nil, "cannot read " .. vectors .. "/policy.tsv")
local prows = 0
lineno = 0
for line in (ptsv and ptsv:lines() or function() end) do
	lineno = lineno + 1
	if line ~= "" and line:sub(1, 1) ~= "#" then
		prows = prows + 1
		local f = split_tabs(line)
		local text = f[1] == "-" and "" or unescape(f[1]:gsub("\\r", "\r"))
		check(#f == 6, "policy.tsv:" .. lineno .. ": 6 columns")
		local kind, pool, gpus, vram = juice.parse_request(f[2])
		check(kind == "ok", "policy.tsv:" .. lineno .. ": request parses")
		local account = f[3] == "-" and "" or f[3]
		local partition = f[4] == "-" and "" or f[4]
		local p = juice.parse_policy(text)
		local got = "ok"
		if not p then
			got = "bad-policy"
		else
			local what = juice.check_policy(p, pool, gpus, vram, account, partition)
			if what then got = "refuse " .. what end
		end
		-- A run that waits for its user's GPUs (held, column 5) is the controller's: allowed at submission.
		local want = f[6] == "wait" and "ok" or f[6]
		check(got == want, string.format("policy.tsv:%d: %s %s %s %s: got %s, want %s", lineno, f[1], f[2], f[3], f[4], got, tostring(want)))
	end
end
if ptsv then ptsv:close() end
check(prows >= 100, "policy.tsv: rows")
print(string.format("policy.tsv: %d rows", prows))

-- test/vectors/sizes.tsv: the sizes users read in messages, as internal/vram.Readable prints them.
local stsv = io.open(vectors .. "/sizes.tsv", "r")
check(stsv ~= nil, "cannot read " .. vectors .. "/sizes.tsv")
local srows = 0
for line in (stsv and stsv:lines() or function() end) do
	if line ~= "" and line:sub(1, 1) ~= "#" then
		local bytes, want = line:match("^(%d+)\t(.*)$")
		srows = srows + 1
		local got = juice.readable(bytes)
		check(got == want, string.format("sizes.tsv: %s: got %s, want %s", tostring(bytes), tostring(got), tostring(want)))
	end
end
if stsv then stsv:close() end
check(srows >= 10, "sizes.tsv: rows")
print(string.format("sizes.tsv: %d rows", srows))

-- Issue 26, finding 9: the refusal a user reads states sizes as typed (80.000000001), not in bytes.
do
	local what, why = juice.check_policy(juice.parse_policy("max_vram = 80GiB\n"), "test", 1, "85899345921", "", "")
	check(what == "vram" and why == "a VRAM slice of 80.000000001GiB asked for, at most 80GiB allowed",
		"vram refusal reads as typed: " .. tostring(why))
end

-- The policy file applies at submission, and is re-read when it changes.
local function policy_file(text)
	if text == nil then
		os.remove(JUICE_POLICY_FILE)
	else
		local pf = assert(io.open(JUICE_POLICY_FILE, "w"))
		pf:write(text)
		pf:close()
	end
	juice.forget_policy()
end
policy_file(nil)
rc, jd = submit({ "JUICE_REQUEST=juice:v1:pool=any,gpus=1024" }, nil)
check(rc == 0, "no policy file: the grammar's bounds only")
policy_file("max_gpus = 8\nmax_vram = 80GiB\npools = test, demo\n")
rc, jd, msg = submit({ "JUICE_REQUEST=juice:v1:pool=test,gpus=9" }, nil)
check(rc == slurm.ERROR and msg and msg:find("at most 8") and jd.admin_comment == nil, "over max_gpus refused: " .. tostring(msg))
rc, jd, msg = submit({ "JUICE_REQUEST=juice:v1:pool=test,gpus=1,vram=85899345921" }, nil)
check(rc == slurm.ERROR and msg and msg:find("vram") and jd.admin_comment == nil, "over max_vram refused: " .. tostring(msg))
rc, jd, msg = submit({ "JUICE_REQUEST=juice:v1:pool=other,gpus=1" }, nil)
check(rc == slurm.ERROR and msg and msg:find("pool") and jd.admin_comment == nil, "unknown pool refused: " .. tostring(msg))
rc, jd = submit({ "JUICE_REQUEST=juice:v1:pool=demo,gpus=8" }, nil)
check(rc == 0 and jd.admin_comment == "juice:v1:pool=demo,gpus=8", "within the policy")
-- A pool's own limits: the job's account (--account, else the user's default)
-- and partition (--partition, else the default one in part_list).
policy_file("pools = a100, test\npool.a100.accounts = physics\npool.a100.partitions = gpu\n" ..
	"pool.a100.max_gpus = 2\npool.a100.max_gpus_per_user = 4\n")
local function submit_as(account, default_account, partition, parts, req)
	local jd = { spank_job_env = env({ "JUICE_REQUEST=" .. req }), account = account,
		default_account = default_account, partition = partition }
	last_user_msg = nil
	return slurm_job_submit(jd, parts or {}, 1000), jd, last_user_msg
end
local gpu_default = { gpu = { name = "gpu", flag_default = 1 }, cpu = { name = "cpu", flag_default = 0 } }
local cpu_default = { gpu = { name = "gpu", flag_default = 0 }, cpu = { name = "cpu", flag_default = 1 } }
rc, jd = submit_as("physics", nil, "gpu", nil, "juice:v1:pool=a100,gpus=2")
check(rc == 0 and jd.admin_comment == "juice:v1:pool=a100,gpus=2", "account and partition allowed")
rc, jd = submit_as(nil, "physics", nil, gpu_default, "juice:v1:pool=a100,gpus=1")
check(rc == 0, "the default account and the default partition")
rc, jd, msg = submit_as("chem", "physics", "gpu", nil, "juice:v1:pool=a100,gpus=1")
check(rc == slurm.ERROR and msg and msg:find('account "chem"', 1, true) and msg:find("physics") and jd.admin_comment == nil,
	"an account not allowed in the pool: " .. tostring(msg))
rc, jd, msg = submit_as(nil, "physics", nil, cpu_default, "juice:v1:pool=a100,gpus=1")
check(rc == slurm.ERROR and msg and msg:find('partition "cpu"', 1, true) and jd.admin_comment == nil,
	"the default partition not allowed in the pool: " .. tostring(msg))
rc, jd, msg = submit_as(nil, nil, "gpu", nil, "juice:v1:pool=a100,gpus=1")
check(rc == slurm.ERROR and msg and msg:find('account ""', 1, true), "no account: " .. tostring(msg))
rc, jd, msg = submit_as("physics", nil, "gpu", nil, "juice:v1:pool=a100,gpus=3")
check(rc == slurm.ERROR and msg and msg:find("at most 2 allowed per job in pool", 1, true), "a pool's max_gpus: " .. tostring(msg))
rc, jd = submit_as(nil, nil, "cpu", nil, "juice:v1:pool=test,gpus=3")
check(rc == 0, "another pool's limits do not apply")
policy_file("max_gpus = lots\n")
rc, jd, msg = submit({ "JUICE_REQUEST=juice:v1:pool=demo,gpus=1" }, nil)
check(rc == slurm.ERROR and msg and msg:find("policy is broken") and last_error:find("line 1"), "a broken policy refuses Juice jobs")
rc, jd = submit({ "OTHER=1" }, nil)
check(rc == 0, "a broken policy never touches other jobs")
policy_file(nil)

-- Licenses: each pool a Slurm license, juice_<pool>@juice:<n>, when
-- JUICE_LICENSES=on in the hooks' settings.
local function config_file(text)
	if text == nil then
		os.remove(JUICE_CONFIG_FILE)
	else
		local cf = assert(io.open(JUICE_CONFIG_FILE, "w"))
		cf:write(text)
		cf:close()
	end
	juice.forget_policy()
end
local function submit_licenses(req, licenses)
	local jd = { spank_job_env = env({ "JUICE_REQUEST=" .. req }), licenses = licenses }
	last_user_msg = nil
	return slurm_job_submit(jd, {}, 1000), jd, last_user_msg
end
-- Without the file, or without the line (a settings file from before licenses): off.
config_file(nil)
rc, jd = submit_licenses(R, "matlab:1")
check(rc == 0 and jd.licenses == "matlab:1" and jd.admin_comment == R, "no settings file: licenses off")
config_file("JUICE_HOOK_URL=https://127.0.0.1:7171\n")
rc, jd = submit_licenses(R, nil)
check(rc == 0 and jd.licenses == nil, "no JUICE_LICENSES line: licenses off")
config_file("JUICE_LICENSES=off\n")
rc, jd = submit_licenses(R, "juice_test@juice:5")
check(rc == 0 and jd.licenses == "juice_test@juice:5", "off leaves the user's licenses alone, even a Juice one")
-- test/vectors/licenses.tsv, with licenses on.
config_file("# hooks\nJUICE_LICENSES=off\nJUICE_LICENSES=on # the last one counts, as in the shell\n")
local ltsv = io.open(vectors .. "/licenses.tsv", "r")
check(ltsv ~= nil, "cannot read " .. vectors .. "/licenses.tsv")
local lrows, lrefused = 0, 0
lineno = 0
for line in (ltsv and ltsv:lines() or function() end) do
	lineno = lineno + 1
	if line ~= "" and line:sub(1, 1) ~= "#" then
		lrows = lrows + 1
		local f = split_tabs(line)
		local where = string.format("licenses.tsv:%d", lineno)
		check(#f == 4, where .. ": 4 columns")
		local user = f[2] ~= "-" and f[2] or nil
		rc, jd, msg = submit_licenses(f[1], user)
		if f[3] == "ok" then
			check(rc == 0 and jd.licenses == f[4] and jd.admin_comment == f[1],
				string.format("%s: want %s, got %s %s (%s)", where, f[4], tostring(rc), tostring(jd.licenses), tostring(msg)))
		else
			lrefused = lrefused + 1
			check(rc == slurm.ERROR and msg and msg:find("^juice: ") and msg:find(f[4], 1, true) and
				jd.licenses == user and jd.admin_comment == nil,
				string.format("%s: want a refusal naming %s, got %s %s", where, f[4], tostring(rc), tostring(msg)))
		end
	end
end
if ltsv then ltsv:close() end
check(lrows >= 10 and lrefused > 0, "licenses.tsv: rows of both kinds")
print(string.format("licenses.tsv: %d rows", lrows))
-- The empty licenses string is none.
rc, jd = submit_licenses(RV, "")
check(rc == 0 and jd.licenses == "juice_test@juice:1", "a VRAM slice takes one license: " .. tostring(jd.licenses))
-- A request refused before (a bad pool, a policy limit) never gets a license.
rc, jd, msg = submit_licenses("juice:v1:pool=-x,gpus=1", "matlab:1")
check(rc == slurm.ERROR and jd.licenses == "matlab:1" and msg:find("bad pool"), "bad pool: refused, licenses untouched")
policy_file("pools = test\n")
rc, jd, msg = submit_licenses("juice:v1:pool=other,gpus=1", nil)
check(rc == slurm.ERROR and jd.licenses == nil and msg:find("pool"), "a pool not the site's: refused, no license")
policy_file(nil)
config_file("JUICE_LICENSES=on\n")
-- Plain jobs are not touched, whatever they name.
rc, jd = submit({ "OTHER=1" }, nil)
check(rc == 0 and jd.licenses == nil, "licenses on: a plain job is untouched")
local plain = { licenses = "juice_test@juice:1" }
check(slurm_job_submit(plain, {}, 1000) == 0 and plain.licenses == "juice_test@juice:1", "licenses on: a plain job keeps what it names")
-- Quoted values and export, as the shell reads them.
config_file("export JUICE_LICENSES='on'\n")
rc, jd = submit_licenses(R, nil)
check(rc == 0 and jd.licenses == "juice_test@juice:2", "export JUICE_LICENSES='on'")
config_file('JUICE_LICENSES="off"\n')
rc, jd = submit_licenses(R, nil)
check(rc == 0 and jd.licenses == nil, 'JUICE_LICENSES="off"')
-- A value that is neither refuses every Juice job (never half applied) and says why in the log.
last_error = nil
config_file("JUICE_LICENSES=yes\n")
rc, jd, msg = submit_licenses(R, nil)
check(rc == slurm.ERROR and jd.admin_comment == nil and msg:find("settings are broken") and last_error and
	last_error:find("JUICE_LICENSES", 1, true), "a bad JUICE_LICENSES refuses Juice jobs: " .. tostring(last_error))
rc, jd = submit({ "OTHER=1" }, nil)
check(rc == 0, "a bad JUICE_LICENSES never touches other jobs")
-- Modification: a user may change a Juice job's other licenses, not drop or change its Juice license.
config_file("JUICE_LICENSES=on\n")
local function modify_licenses(licenses, uid)
	last_user_msg = nil
	return slurm_job_modify({ licenses = licenses }, { job_id = 7, admin_comment = R }, {}, uid or 1000), last_user_msg
end
check(modify_licenses("matlab:2,juice_test@juice:2") == 0, "modify: other licenses beside the Juice one")
check(modify_licenses("juice_test@juice:2") == 0, "modify: the Juice license alone")
rc, msg = modify_licenses("matlab:2")
check(rc == slurm.ESLURM_ACCESS_DENIED and msg and msg:find("juice_test@juice:2", 1, true), "modify: the Juice license dropped: " .. tostring(msg))
check(modify_licenses("") == slurm.ESLURM_ACCESS_DENIED, "modify: every license dropped")
check(modify_licenses("juice_test@juice:1") == slurm.ESLURM_ACCESS_DENIED, "modify: fewer of the Juice license")
check(modify_licenses("juice_test@juice:2,juice_test@juice:2") == slurm.ESLURM_ACCESS_DENIED, "modify: the Juice license twice")
check(modify_licenses("juice_test@juice:2,juice_big@juice:8") == slurm.ESLURM_ACCESS_DENIED, "modify: another Juice license")
check(modify_licenses("juice_test@juice:2|matlab:1") == slurm.ESLURM_ACCESS_DENIED, "modify: an OR")
check(modify_licenses("matlab:2", 0) == 0, "modify: root may")
check(slurm_job_modify({ licenses = "x" }, { job_id = 7, admin_comment = "mine" }, {}, 1000) == 0, "modify: a plain job's licenses")
config_file("JUICE_LICENSES=off\n")
check(modify_licenses("matlab:2") == 0, "modify: licenses off")
config_file(nil)

-- What reaches the log is escaped: a newline in a request never starts a line.
rc, jd, msg = submit({ "JUICE_REQUEST=juice:v1:pool=test,gpus=1\njuice: job_submit: uid 0 request forged" }, nil)
check(rc == slurm.ERROR and msg and not msg:find("[%c]") and msg:find("\\010"), "newline escaped: " .. tostring(msg))
check(not last_log:find("[%c]"), "newline escaped in slurmctld's log")
check(juice.esc('a"b\\c\255\127') == '"a\\034b\\092c\\255\\127"', "esc: " .. juice.esc('a"b\\c\255\127'))

check(modify({ comment = "x" }, R, 1000) == slurm.ESLURM_ACCESS_DENIED, "user edits comment of juice job")
check(modify({ admin_comment = "x" }, R, 1000) == slurm.ESLURM_ACCESS_DENIED, "user edits admin_comment")
check(modify({ time_limit = 5 }, R, 1000) == 0, "user edits something else")
check(modify({ comment = "x" }, R, 0) == 0, "root edits comment")
check(modify({ comment = "x" }, R, 4243) == 0, "SlurmUser (slurmctld's effective uid) edits")
check(modify({ comment = "x" }, R, 4242) == slurm.ESLURM_ACCESS_DENIED, "slurmctld's real uid is not SlurmUser's")
-- SlurmUser is whoever slurmctld runs as, not a user of some name.
for line in io.lines("/etc/passwd") do
	local u = tonumber(line:match("^slurm:[^:]*:(%d+):") or "")
	if u and u ~= 0 and u ~= 4243 then
		check(modify({ comment = "x" }, R, u) == slurm.ESLURM_ACCESS_DENIED, "a user named slurm is nobody special")
	end
end
check(modify({ comment = "x" }, nil, 1000) == 0, "non-juice job, no admin_comment")
check(modify({ comment = "juice:v1:pool=x,gpus=1" }, "other", 1000) == 0, "non-juice job")

check(juice.job_submit ~= nil and rawget(_G, "parse_request") == nil, "the module sets no globals")

-- A site's own job_submit.lua that calls the module: the site's rules and
-- Juice's both apply, each refusal says whose it is.
local hooks_dir = arg[1]:match("^(.*)/") or "."
dofile(hooks_dir .. "/../test/site/job_submit.lua")
rc, jd = submit({ "OTHER=1" }, nil)
check(rc == 0 and jd.time_limit == 7 and jd.admin_comment == nil, "site: plain job gets the site's time limit")
local jd2 = { spank_job_env = env({ "JUICE_REQUEST=" .. R }), time_limit = 30 }
rc = slurm_job_submit(jd2, {}, 1000)
check(rc == 0 and jd2.time_limit == 30 and jd2.admin_comment == R and jd2.comment == R,
	"site: Juice job gets its request and keeps its time limit")
local jd3 = { spank_job_env = env({ "JUICE_REQUEST=" .. R }), name = "site-refuses-this" }
last_user_msg = nil
rc = slurm_job_submit(jd3, {}, 1000)
check(rc == slurm.ERROR and last_user_msg and last_user_msg:find("^site: ") and jd3.admin_comment == nil,
	"site: the site's refusal")
rc, jd, msg = submit({ "JUICE_REQUEST=juice:v1:pool=test,gpus=0" }, nil)
check(rc == slurm.ERROR and msg and msg:find("^juice: ") and jd.admin_comment == nil, "site: Juice's refusal")
check(modify({ comment = "x" }, R, 1000) == slurm.ESLURM_ACCESS_DENIED, "site: the request stays guarded")

-- The default script without its module: it loads (a script that fails to load
-- stops every submission), plain jobs pass, Juice jobs are refused saying why.
local tmp = os.tmpname()
os.remove(tmp)
check(os.execute("mkdir -m 0700 " .. tmp) == 0, "mkdir " .. tmp)
local src = io.open(arg[1], "r")
local copy = io.open(tmp .. "/job_submit.lua", "w")
copy:write(src:read("*a"))
src:close()
copy:close()
package.path = base_path
package.loaded.juice_submit = nil
local logged_error
slurm.log_error = function(fmt, ...) logged_error = string.format(fmt, ...) end
local loaded_ok, load_rc = pcall(dofile, tmp .. "/job_submit.lua")
check(loaded_ok and load_rc == slurm.SUCCESS, "missing module: the default script still loads: " .. tostring(load_rc))
check(logged_error and logged_error:find("juice_submit.lua", 1, true), "missing module: logged")
rc, jd = submit({ "OTHER=1" }, "mine")
check(rc == 0 and jd.admin_comment == nil and jd.comment == "mine", "missing module: plain job passes")
rc, jd = submit(nil, nil)
check(rc == 0, "missing module: job without SPANK environment passes")
rc, jd, msg = submit({ "JUICE_REQUEST=" .. R }, nil)
check(rc == slurm.ERROR and msg and msg:find("^juice: ") and jd.admin_comment == nil,
	"missing module: Juice job refused with a message")
check(modify({ comment = "x" }, R, 1000) == 0, "missing module: modify passes")
os.remove(tmp .. "/job_submit.lua")
os.remove(tmp)
os.remove(JUICE_PROC_STATUS)
os.remove(JUICE_CONFIG_FILE)

print(string.format("job_submit.lua: %d passed, %d failed", passed, failed))
os.exit(failed == 0 and 0 or 1)
