--[[
juice_submit.lua: juice-slurm's bridge from the SPANK plugin to the job record,
as a Lua module that a site's own job_submit.lua requires and calls.

Install: next to slurm.conf, beside the site's job_submit.lua (or our thin
default hooks/job_submit.lua, which only calls this module), with
  JobSubmitPlugins=lua
A site script calls it from its own functions:

  package.path = "/etc/slurm/?.lua;" .. package.path
  local juice = require("juice_submit")
  function slurm_job_submit(job_desc, part_list, submit_uid)
      -- the site's own changes and refusals, before or after
      return juice.job_submit(job_desc, part_list, submit_uid)
  end
  function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
      return juice.job_modify(job_desc, job_rec, part_list, modify_uid)
  end

slurmctld re-reads job_submit.lua when its mtime changes, not this module:
after replacing juice_submit.lua, touch job_submit.lua.

At submission the juice SPANK plugin (srun/sbatch/salloc) validated the
--juice-* options and put JUICE_REQUEST (plus JUICE_POOL, JUICE_GPU_COUNT,
JUICE_VRAM) into the job's spank_job_env.  Here, in slurmctld:
  * the request is checked again, strictly, by the rules of
    test/vectors/README.md section 3 (parse_request);
  * it is written into admin_comment, which the job's owner cannot change and
    which is the only place the reconciler trusts;
  * it is written into comment too, for people, when the user gave no comment
    (or gave one that merely looks like a request);
  * a request over 1024 bytes (the comment limit) is refused, never cut;
  * a request over the site's limits (juice-policy.conf: max_gpus, max_vram,
    pools, and each pool's own max_gpus, accounts and partitions; the
    controller applies the same file again) is refused with the limit it
    breaks.  The account is the job's --account or the user's default one;
    the partition its --partition or the default partition.  No policy file: only the grammar's bounds apply.  A
    policy file that does not parse refuses every Juice job (a site's limits
    are never half applied) and says so in slurmctld's log.
  * the job is given the Slurm license of its pool, juice_<pool>@juice:<n>,
    beside the user's own -L licenses, when JUICE_LICENSES=on (below): each
    Juice pool is a remote license served by slurmdbd, whose count the
    controller keeps at what the pool can serve this cluster (the GPUs of its
    active agents less those other clients hold), so Slurm keeps a job the
    pool cannot serve PENDING with Reason=Licenses instead of starting it.
    n is the GPUs the request takes; a VRAM slice (--juice-vram) takes 1, a
    whole GPU's worth: a count cannot share one GPU between slices, so a slice
    is counted as the GPU it may keep others from (conservative: a pool of 4
    GPUs runs at most 4 jobs at once through Slurm, slices or not).  A job that
    names a license of server juice itself, or asks an OR of licenses (-L
    a|b, which cannot take another license beside it), is refused saying so.
A job without JUICE_REQUEST passes through untouched.  What is logged is
escaped: a user's text never forges a line of slurmctld's log.

JUICE_LICENSES is read from /etc/juice-slurm/juice-config.sh (the hooks'
settings on this host; a line JUICE_LICENSES=on or JUICE_LICENSES=off), at
most once a second.  The file as shipped says off, and so does a file
without the line (one kept from before licenses existed): a site without
slurmdbd keeps working after an upgrade.  A value other than on or off refuses every
Juice job, saying so in slurmctld's log.  Turn it on only with accounting set
up and the controller's own setting licenses = on (docs/admin.md): a job asking
a license slurmdbd does not serve is refused by Slurm at submission, and so is
one asking more than the license's count now unless slurm.conf has
SchedulerParameters=allow_zero_lic.

On modification, a user (neither root nor SlurmUser) may not edit comment or
admin_comment of a job whose admin_comment is a Juice request, nor, with
JUICE_LICENSES=on, give it licenses without the Juice license its request is
due (or with another of server juice).

The module sets no globals (its only state: the caches of the policy and of JUICE_LICENSES, and SlurmUser's uid); it uses the
`slurm` table slurmctld provides at call time.
]]

local M = {}

local MAX_LEN = 1024           -- comment/admin_comment limit in Slurm
local POOL_MAX = 63
local PREFIX = "juice:"

-- Users allowed to edit a Juice job's comments: root and SlurmUser (the
-- reconciler updates jobs through slurmrestd with SlurmUser's token).  This
-- module runs inside slurmctld, which runs as SlurmUser: SlurmUser is this
-- process's own effective uid, read from /proc/self/status, so no user name is
-- configured here (slurm.conf's SlurmUser= is the one place that names it).
-- Read at the first modification (slurmctld may load scripts before it drops
-- root); an unreadable status trusts root alone and says so.
-- JUICE_PROC_STATUS (a global set before this script is loaded) overrides the
-- path, for tests.
local PROC_STATUS = JUICE_PROC_STATUS or "/proc/self/status"
local trusted_uids

local function trusted(uid)
	if trusted_uids == nil then
		trusted_uids = { [0] = true }
		local f, euid = io.open(PROC_STATUS, "r"), nil
		if f then
			for line in f:lines() do
				-- "Uid:" real, effective, saved set, filesystem
				euid = euid or line:match("^Uid:%s+%d+%s+(%d+)")
			end
			f:close()
		end
		if euid then
			trusted_uids[tonumber(euid)] = true
		else
			slurm.log_error("juice: no effective uid in %s: only root may edit Juice jobs' comments", PROC_STATUS)
		end
	end
	return trusted_uids[uid] == true
end

-- Value of NAME in spank_job_env (a table indexed from 0: use pairs).
-- Returns nil when absent; false when given twice with different values.
local function spank_env(job_desc, name)
	local env, value = job_desc.spank_job_env, nil
	if env == nil then return nil end
	local prefix = name .. "="
	for _, entry in pairs(env) do
		if type(entry) == "string" and entry:sub(1, #prefix) == prefix then
			local v = entry:sub(#prefix + 1)
			if value ~= nil and value ~= v then return false end
			value = v
		end
	end
	return value
end

-- The canonical request (test/vectors/README.md section 3), the same rules in
-- the same order as the C plugin and the reconciler:
--   parse_request(s) -> "ok", pool, gpus (a number), vram (a string of bytes,
--                       nil for whole GPUs)
--                     | "none"          (not a Juice request: no "juice:")
--                     | "error", what   (version|length|form|pool|gpus|vram:
--                                        the first rule broken)
-- Lua 5.1 numbers are doubles: vram stays a string and its bound
-- (2^63-1) is compared as a string of the same length.
local MAX_GPUS = 1024
local MAX_VRAM = "9223372036854775807"
local FIELDS = { "pool=", "gpus=", "vram=" }

local function parse_request(s)
	if type(s) ~= "string" or s:sub(1, #PREFIX) ~= PREFIX then return "none" end
	if s:sub(1, 9) ~= "juice:v1:" then return "error", "version" end
	if #s > MAX_LEN then return "error", "length" end
	-- The rest split at every ",": pool=, gpus= and maybe vram=, in order.
	local f, start = {}, 10
	while true do
		local comma = s:find(",", start, true)
		f[#f + 1] = s:sub(start, comma and comma - 1 or #s)
		if not comma then break end
		start = comma + 1
	end
	if #f < 2 or #f > 3 then return "error", "form" end
	for i, v in ipairs(f) do
		if v:sub(1, 5) ~= FIELDS[i] then return "error", "form" end
		f[i] = v:sub(6)
	end
	local pool, gpus, vram = f[1], f[2], f[3]
	if #pool > POOL_MAX or not pool:find("^[A-Za-z0-9][A-Za-z0-9._-]*$") then
		return "error", "pool"
	end
	if not gpus:find("^[1-9][0-9]*$") or #gpus > 4 or tonumber(gpus) > MAX_GPUS then
		return "error", "gpus"
	end
	if vram ~= nil and (not vram:find("^[1-9][0-9]*$") or #vram > #MAX_VRAM or
	   (#vram == #MAX_VRAM and vram > MAX_VRAM) or gpus ~= "1") then
		return "error", "vram"
	end
	return "ok", pool, tonumber(gpus), vram
end

-- A user's text for a log line: control characters, quotes, backslashes and
-- bytes above 126 as \ddd (Lua's decimal escapes), quoted, at most 200 bytes
-- shown.  Lua's own %q leaves a newline as a backslash and a real newline,
-- which would start a forged line.
local function esc(s)
	s = tostring(s)
	local more = ""
	if #s > 200 then s, more = s:sub(1, 200), "..." end
	return '"' .. s:gsub('[%c"\\\128-\255]', function(c)
		return string.format("\\%03d", c:byte())
	end) .. more .. '"'
end

-- The site policy (juice-policy.conf), the rules of reconcile/policy and
-- test/vectors/README.md section 5, tested against test/vectors/policy.tsv:
--   parse_policy(text) -> policy | nil, why
--   check_policy(policy, pool, gpus, vram, account, partition) -> nil | what, why
-- policy = { max_gpus = n, max_vram = "bytes" or nil, pools = set or nil,
--            pool = { [name] = { max_gpus, max_gpus_per_user, accounts,
--                                partitions, gpu_vram, handoff } } }.
-- max_vram is at most 2^53 bytes and kept as a string of digits, so it is
-- compared with a request's VRAM exactly, as strings.  max_gpus_per_user
-- (the GPUs one user may hold in a pool at once) is the controller's to
-- enforce, as only it knows what a user holds: here a job asking more than it
-- on its own is refused, since it could never run.
local VRAM_BOUND = "9007199254740992" -- 2^53
local USER_CAP_BOUND = 999999
local UNITS = { [""] = 1073741824, b = 1, mb = 1000000, gb = 1000000000,
	mib = 1048576, gib = 1073741824 }

-- a <= b for strings of decimal digits without leading zeros.
local function le_digits(a, b)
	if #a ~= #b then return #a < #b end
	return a <= b
end

local function parse_max_vram(v)
	local digits, unit = v:match("^([1-9][0-9]*)(%a*)$")
	local mult = unit and UNITS[unit:lower()]
	if not digits or not mult then
		return nil, "want a whole number above 0 with an optional unit B, MB, GB, MiB or GiB"
	end
	if #digits > 16 then return nil, "at most " .. VRAM_BOUND .. " bytes" end
	local bytes
	if mult == 1 then
		bytes = digits
	else
		-- Exact: a product of at most 2^53 is, and a larger one stays larger.
		bytes = string.format("%.0f", tonumber(digits) * mult)
	end
	if not le_digits(bytes, VRAM_BOUND) then return nil, "at most " .. VRAM_BOUND .. " bytes" end
	return bytes
end

-- A decimal number from 1 to max without a leading zero or sign.
local function parse_count(v, max)
	if not v:find("^[1-9][0-9]*$") or #v > #tostring(max) or tonumber(v) > max then return nil end
	return tonumber(v)
end

local function good_name(name)
	return #name <= POOL_MAX and name:find("^[A-Za-z0-9][A-Za-z0-9._-]*$") ~= nil
end

-- A set of names (the pool-name rule) separated by commas, spaces or tabs;
-- nil when empty or when one is bad.
local function parse_names(value, lower)
	local set, any = {}, false
	for name in value:gmatch("[^,%s]+") do
		if not good_name(name) then return nil, "bad name " .. esc(name) end
		set[lower and name:lower() or name], any = true, true
	end
	if not any then return nil, "the list is empty" end
	return set
end

local POOL_SETTINGS = { max_gpus = true, max_gpus_per_user = true, accounts = true,
	partitions = true, gpu_vram = true, handoff = true }

local function parse_policy(text)
	local p, seen, n, first = { max_gpus = MAX_GPUS, pool = {} }, {}, 0, {}
	for line in (text .. "\n"):gmatch("([^\n]*)\n") do
		n = n + 1
		line = line:gsub("#.*$", ""):gsub("^%s+", ""):gsub("%s+$", "")
		if line ~= "" then
			local key, value = line:match("^([^=]-)%s*=%s*(.-)$")
			if not key then return nil, string.format("line %d: want key = value", n) end
			if seen[key] then return nil, string.format("line %d: %s is given twice", n, key) end
			seen[key] = true
			-- pool.<name>.<setting>: the name runs to the key's last ".".
			local pname, setting = key:match("^pool%.(.+)%.([^.]*)$")
			if key:sub(1, 5) == "pool." then
				if not pname or not good_name(pname) or not POOL_SETTINGS[setting] then
					return nil, string.format("line %d: bad pool setting %s", n, esc(key))
				end
				local pl = p.pool[pname]
				if not pl then pl = {}; p.pool[pname] = pl; first[pname] = n end
				if setting == "max_gpus" or setting == "max_gpus_per_user" then
					local v = parse_count(value, setting == "max_gpus" and MAX_GPUS or USER_CAP_BOUND)
					if not v then return nil, string.format("line %d: %s: want a whole number", n, key) end
					pl[setting] = v
				elseif setting == "accounts" or setting == "partitions" then
					local set, why = parse_names(value, setting == "accounts")
					if not set then return nil, string.format("line %d: %s: %s", n, key, why) end
					pl[setting] = set
				elseif setting == "handoff" then
					-- The controller's alone (session hand-off); read here only so that the file means the same to both.
					if value ~= "on" and value ~= "off" then
						return nil, string.format("line %d: %s: want on or off", n, key)
					end
					pl.handoff = value == "on"
				else
					local bytes, why = parse_max_vram(value)
					if not bytes then return nil, string.format("line %d: %s: %s", n, key, why) end
					pl.gpu_vram = bytes
				end
			elseif key == "max_gpus" then
				local v = parse_count(value, MAX_GPUS)
				if not v then
					return nil, string.format("line %d: max_gpus: want a whole number from 1 to %d", n, MAX_GPUS)
				end
				p.max_gpus = v
			elseif key == "max_vram" then
				local bytes, why = parse_max_vram(value)
				if not bytes then return nil, string.format("line %d: max_vram: %s", n, why) end
				p.max_vram = bytes
			elseif key == "pools" then
				local set, why = parse_names(value, false)
				if not set then return nil, string.format("line %d: pools: %s", n, why) end
				p.pools = set
			else
				return nil, string.format("line %d: unknown setting %s", n, esc(key))
			end
		end
	end
	-- A pool's own limits for a pool no job may use are a typo, not a limit.
	if p.pools then
		for name, line in pairs(first) do
			if not p.pools[name] then
				return nil, string.format("line %d: pool %s is not one of pools", line, esc(name))
			end
		end
	end
	return p
end

local function sorted_keys(set)
	local t = {}
	for k in pairs(set) do t[#t + 1] = k end
	table.sort(t)
	return table.concat(t, ", ")
end

-- q, r = digits / d, for a string of decimal digits and a number d < 2^31:
-- exact in Lua 5.1's doubles, as every partial remainder is below 10 * d.
local function divmod(digits, d)
	local q, r = {}, 0
	for i = 1, #digits do
		r = r * 10 + digits:byte(i) - 48
		local qd = math.floor(r / d)
		q[#q + 1], r = qd, r - qd * d
	end
	local s = table.concat(q):gsub("^0+", "")
	return s == "" and "0" or s, r
end

local GIB, MIB = 1073741824, 1048576
local READABLE_UNITS = { { GIB, "GiB" }, { MIB, "MiB" }, { 1000000000, "GB" }, { 1000000, "MB" } }

-- A size for a message a user reads, as internal/vram.Readable prints it
-- (test/vectors/sizes.tsv): the exact GiB, MiB, GB or MB with at most 3
-- decimals; under 1MiB, bytes; else GiB rounded up to 9 decimals, which gives
-- back the GiB a user typed.  bytes is a string of decimal digits.
local function readable(bytes)
	for _, u in ipairs(READABLE_UNITS) do
		if le_digits(tostring(u[1]), bytes) then
			local whole, rest = divmod(bytes, u[1])
			if rest == 0 then return whole .. u[2] end
			for d = 1, 3 do
				local scaled = rest * 10 ^ d -- below 2^40: exact
				if math.fmod(scaled, u[1]) == 0 then
					return string.format("%s.%0" .. d .. "d%s", whole, scaled / u[1], u[2])
				end
			end
		end
	end
	if not le_digits(tostring(MIB), bytes) then return bytes .. "B" end
	local whole, rest = divmod(bytes, GIB)
	-- ceil(rest * 10^9 / 2^30) = ceil(rest * 5^9 / 2^21): rest * 5^9 < 2^51.
	local frac = math.ceil(rest * 1953125 / 2097152)
	if frac == 1000000000 then whole, frac = string.format("%.0f", tonumber(whole) + 1), 0 end
	if frac == 0 then return whole .. "GiB" end
	return whole .. "." .. string.format("%09d", frac):gsub("0+$", "") .. "GiB"
end

local function check_policy(p, pool, gpus, vram, account, partition)
	if p == nil then return nil end
	if p.pools and not p.pools[pool] then
		return "pool", string.format("pool %s is not one of the site's pools", esc(pool))
	end
	local pl = p.pool[pool] or {}
	account, partition = account or "", partition or ""
	if pl.accounts and not pl.accounts[account:lower()] then
		return "account", string.format("jobs of account %s may not use pool %s (its accounts: %s)",
			esc(account), esc(pool), sorted_keys(pl.accounts))
	end
	if pl.partitions then
		for part in (partition .. ","):gmatch("([^,]*),") do
			if not pl.partitions[part] then
				return "partition", string.format("jobs of partition %s may not use pool %s (its partitions: %s)",
					esc(part), esc(pool), sorted_keys(pl.partitions))
			end
		end
	end
	if gpus > p.max_gpus then
		return "gpus", string.format("%d GPUs asked for, at most %d allowed per job", gpus, p.max_gpus)
	end
	if pl.max_gpus and gpus > pl.max_gpus then
		return "gpus", string.format("%d GPUs asked for, at most %d allowed per job in pool %s", gpus, pl.max_gpus, esc(pool))
	end
	if pl.max_gpus_per_user and gpus > pl.max_gpus_per_user then
		return "gpus", string.format("%d GPUs asked for, but one user may hold at most %d in pool %s at once",
			gpus, pl.max_gpus_per_user, esc(pool))
	end
	if vram and p.max_vram and not le_digits(vram, p.max_vram) then
		return "vram", string.format("a VRAM slice of %s asked for, at most %s allowed", readable(vram), readable(p.max_vram))
	end
	return nil
end

-- The policy file, re-read at most once a second: a change applies to the
-- next submission without touching this script.  JUICE_POLICY_FILE (a global
-- set before this script is loaded) overrides the path, for tests.
local POLICY_FILE = JUICE_POLICY_FILE or "/etc/juice-slurm/juice-policy.conf"
local cache = { at = nil }

-- Returns policy (nil: no file, the grammar's bounds only) or false, why.
local function site_policy()
	local now = os.time()
	if cache.at == now then return cache.policy, cache.why end
	local f = io.open(POLICY_FILE, "r")
	local policy, why
	if f == nil then
		policy = nil
	else
		local text = f:read("*a")
		f:close()
		local p, err = parse_policy(text or "")
		if p then policy = p else policy, why = false, POLICY_FILE .. ": " .. err end
	end
	cache.at, cache.policy, cache.why = now, policy, why
	return policy, why
end

-- The Juice license of a request (see the header): juice_<pool>@juice:<n>,
-- the one name controller/licenses keeps the count of.  n is the request's
-- GPUs: a VRAM slice is asked with 1 GPU (the grammar's rule), so it takes 1.
-- test/vectors/licenses.tsv holds what a job's licenses become.
local LICENSE_SERVER = "@juice"

local function juice_license(pool, gpus)
	return string.format("juice_%s%s:%d", pool, LICENSE_SERVER, gpus)
end

-- The names of a Slurm license list ("a:2,b@s,c*3"; items separated by "," or
-- ";"), each with its count cut off and blanks trimmed.
local function license_items(licenses)
	local items = {}
	for item in licenses:gmatch("[^,;]+") do
		items[#items + 1] = { text = item:match("^%s*(.-)%s*$"), name = item:match("^%s*([^:*]-)%s*[:*]") or item:match("^%s*(.-)%s*$") }
	end
	return items
end

-- What is wrong with a user's licenses beside a Juice license: an OR (25.05's
-- -L a|b, which cannot take another license beside it) or a license of
-- server juice other than except (those are juice-slurm's to give).  nil: fine.
local function license_conflict(licenses, except)
	if licenses:find("|", 1, true) then
		return string.format("licenses %s ask an OR of licenses, which cannot take the job's Juice license beside it", esc(licenses))
	end
	for _, item in ipairs(license_items(licenses)) do
		if item.text ~= except and item.name:lower():sub(-#LICENSE_SERVER) == LICENSE_SERVER then
			return string.format("license %s is juice-slurm's to give (a Juice job gets the one of its pool); drop it from --licenses", esc(item.name))
		end
	end
	return nil
end

-- with_license(licenses, due) -> job_desc.licenses with due added beside the
-- user's own | nil, why.
local function with_license(licenses, due)
	if licenses == nil or licenses == "" then return due end
	local why = license_conflict(licenses)
	if why then return nil, why end
	return licenses .. "," .. due
end

-- keeps_license(licenses, due) -> nil when a job's new licenses still hold due
-- (exactly once) and no other license of server juice | why not.
local function keeps_license(licenses, due)
	local why = license_conflict(licenses, due)
	if why then return why end
	local n = 0
	for _, item in ipairs(license_items(licenses)) do
		if item.text == due then n = n + 1 end
	end
	if n ~= 1 then
		return string.format("its licenses must keep %s, the Juice license its request takes", due)
	end
	return nil
end

-- JUICE_LICENSES from the hooks' settings (see the header), re-read at most
-- once a second.  JUICE_CONFIG_FILE (a global set before this script is
-- loaded) overrides the path, for tests.
local CONFIG_FILE = JUICE_CONFIG_FILE or "/etc/juice-slurm/juice-config.sh"
local settings = { at = nil }

-- Returns true (on), false (off: no file, no line, or off) or nil, why.
local function licenses_on()
	local now = os.time()
	if settings.at == now then return settings.on, settings.why end
	local on, why = false, nil
	local f = io.open(CONFIG_FILE, "r")
	if f then
		for line in f:lines() do
			-- The shell's last assignment wins: so does ours.
			local v = line:match("^%s*export%s+JUICE_LICENSES=(%S*)") or line:match("^%s*JUICE_LICENSES=(%S*)")
			if v then
				v = v:gsub('^"(.*)"$', "%1"):gsub("^'(.*)'$", "%1")
				if v == "on" then on, why = true, nil
				elseif v == "off" then on, why = false, nil
				else on, why = nil, string.format("%s: JUICE_LICENSES=%s: want on or off", CONFIG_FILE, esc(v)) end
			end
		end
		f:close()
	end
	settings.at, settings.on, settings.why = now, on, why
	return on, why
end

-- For the tests.
M.parse_request, M.parse_policy, M.check_policy, M.esc, M.readable = parse_request, parse_policy, check_policy, esc, readable
M.with_license, M.juice_license = with_license, juice_license
-- The files are read again at the next call.
M.forget_policy = function() cache.at, settings.at = nil, nil end

-- The partition a job without --partition gets: the one part_list (the
-- partitions the user may use, by name) flags as the default.  flag_default is
-- a number, and 0 is true in Lua.
local function default_partition(part_list)
	for name, part in pairs(part_list or {}) do
		local ok, flag = pcall(function() return part.flag_default end)
		if ok and flag and flag ~= 0 then return part.name or name end
	end
	return nil
end

local function refuse(msg, code)
	slurm.log_user("juice: %s", msg)
	slurm.log_info("juice: job_submit refused: %s", msg)
	return code or slurm.ERROR
end

-- job_submit(job_desc, part_list, submit_uid): slurm_job_submit's work for
-- juice-slurm.  Returns slurm.SUCCESS (the job untouched when it is not a
-- Juice job) or an error code after telling the user why.
function M.job_submit(job_desc, part_list, submit_uid)
	local req = spank_env(job_desc, "JUICE_REQUEST")
	if req == nil then
		-- Not a Juice job (a plugin that set only the parts is broken).
		if spank_env(job_desc, "JUICE_POOL") ~= nil then
			return refuse("incomplete Juice request (JUICE_POOL without " ..
				"JUICE_REQUEST): is the juice SPANK plugin up to date?")
		end
		return slurm.SUCCESS
	end
	if req == false then
		return refuse("conflicting Juice requests in the job")
	end
	local kind, pool, gpus, vram = parse_request(req)
	if kind == "none" then
		return refuse(string.format("JUICE_REQUEST %s is not a Juice request", esc(req)))
	end
	if kind == "error" then
		local what = pool
		if what == "length" then
			return refuse(string.format(
				"the Juice request is %d bytes, more than the %d a job " ..
				"comment holds", #req, MAX_LEN))
		end
		return refuse(string.format("malformed Juice request %s (bad %s)", esc(req), what))
	end
	-- The parts, when present, must agree with the request.
	local p, g, v = spank_env(job_desc, "JUICE_POOL"),
		spank_env(job_desc, "JUICE_GPU_COUNT"), spank_env(job_desc, "JUICE_VRAM")
	if (p ~= nil and p ~= pool) or (g ~= nil and g ~= tostring(gpus)) or
	   (v ~= nil and v ~= vram) then
		return refuse(string.format(
			"Juice request %s disagrees with JUICE_POOL/JUICE_GPU_COUNT/" ..
			"JUICE_VRAM", esc(req)))
	end
	local policy, why = site_policy()
	if policy == false then
		slurm.log_error("juice: the site policy does not parse, refusing Juice jobs: %s", why)
		return refuse("the site's Juice policy is broken; ask your administrator")
	end
	local what, reason = check_policy(policy, pool, gpus, vram,
		job_desc.account or job_desc.default_account, job_desc.partition or default_partition(part_list))
	if what then
		return refuse(string.format("%s (the site's limit on %s)", reason, what))
	end

	local on, lwhy = licenses_on()
	if on == nil then
		slurm.log_error("juice: refusing Juice jobs: %s", lwhy)
		return refuse("the site's Juice settings are broken; ask your administrator")
	end
	if on then
		local licenses, conflict = with_license(job_desc.licenses, juice_license(pool, gpus))
		if not licenses then return refuse(conflict) end
		job_desc.licenses = licenses
	end

	job_desc.admin_comment = req
	local c = job_desc.comment
	if c == nil or c == "" or parse_request(c) ~= "none" then
		job_desc.comment = req
	end
	slurm.log_info("juice: job_submit: uid %d request %s", submit_uid, req)
	return slurm.SUCCESS
end

-- job_modify(job_desc, job_rec, part_list, modify_uid): slurm_job_modify's
-- work for juice-slurm (keeps a Juice job's request out of its owner's reach).
function M.job_modify(job_desc, job_rec, part_list, modify_uid)
	local kind, pool, gpus = parse_request(job_rec.admin_comment)
	if kind == "none" then return slurm.SUCCESS end
	if trusted(modify_uid) then return slurm.SUCCESS end
	if job_desc.comment ~= nil or job_desc.admin_comment ~= nil then
		-- ESLURM_ACCESS_DENIED: scontrol prints "Access/permission denied".
		return refuse(string.format(
			"job %d is a Juice job: its comment and admin_comment hold " ..
			"the request and cannot be changed", job_rec.job_id),
			slurm.ESLURM_ACCESS_DENIED)
	end
	-- Its Juice license keeps it pending until the pool can serve it: a user
	-- may change the job's other licenses, not drop that one.
	if job_desc.licenses ~= nil and kind == "ok" and licenses_on() then
		local why = keeps_license(job_desc.licenses, juice_license(pool, gpus))
		if why then
			return refuse(string.format("job %d is a Juice job: %s", job_rec.job_id, why), slurm.ESLURM_ACCESS_DENIED)
		end
	end
	return slurm.SUCCESS
end

return M
