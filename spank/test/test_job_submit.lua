-- Unit test of hooks/job_submit.lua with a mock `slurm` table (Lua 5.1, as
-- Debian's job_submit_lua.so uses).  usage: lua5.1 test_job_submit.lua PATH
local passed, failed = 0, 0
local last_user_msg

slurm = {
	SUCCESS = 0, ERROR = -1, ESLURM_ACCESS_DENIED = 2002,
	log_user = function(fmt, ...) last_user_msg = string.format(fmt, ...) end,
	log_info = function() end,
	log_debug = function() end,
}
dofile(arg[1])

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
local slurm_uid
for line in io.lines("/etc/passwd") do
	local u = line:match("^slurm:[^:]*:(%d+):")
	if u then slurm_uid = tonumber(u) end
end
check(modify({ comment = "x" }, R, 1000) == slurm.ESLURM_ACCESS_DENIED, "user edits comment of juice job")
check(modify({ admin_comment = "x" }, R, 1000) == slurm.ESLURM_ACCESS_DENIED, "user edits admin_comment")
check(modify({ time_limit = 5 }, R, 1000) == 0, "user edits something else")
check(modify({ comment = "x" }, R, 0) == 0, "root edits comment")
if slurm_uid then check(modify({ comment = "x" }, R, slurm_uid) == 0, "SlurmUser edits") end
check(modify({ comment = "x" }, nil, 1000) == 0, "non-juice job, no admin_comment")
check(modify({ comment = "juice:v1:pool=x,gpus=1" }, "other", 1000) == 0, "non-juice job")

print(string.format("job_submit.lua: %d passed, %d failed", passed, failed))
os.exit(failed == 0 and 0 or 1)
