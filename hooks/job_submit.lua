--[[
job_submit.lua: juice-slurm's bridge from the SPANK plugin to the job record.

Install: next to slurm.conf (re-read when its mtime changes), with
  JobSubmitPlugins=lua

At submission the juice SPANK plugin (srun/sbatch/salloc) validated the
--juice-* options and put JUICE_REQUEST (plus JUICE_POOL, JUICE_GPU_COUNT,
JUICE_VRAM) into the job's spank_job_env.  Here, in slurmctld:
  * the request is checked again, strictly, by the rules of
    test/vectors/README.md section 3 (parse_request, also reachable as
    juice.parse_request for the tests);
  * it is written into admin_comment, which the job's owner cannot change and
    which is the only place the reconciler trusts;
  * it is written into comment too, for people, when the user gave no comment
    (or gave one that merely looks like a request);
  * a request over 1024 bytes (the comment limit) is refused, never cut.
A job without JUICE_REQUEST passes through untouched.

On modification, a user (neither root nor SlurmUser) may not edit comment or
admin_comment of a job whose admin_comment is a Juice request.
]]

local MAX_LEN = 1024           -- comment/admin_comment limit in Slurm
local POOL_MAX = 63
local PREFIX = "juice:"

-- Users allowed to edit a Juice job's comments: root and SlurmUser (the
-- reconciler updates jobs through slurmrestd as SlurmUser).  Names are
-- resolved to uids from /etc/passwd when the script is loaded.
local TRUSTED_USERS = { "root", "slurm" }

local trusted_uids = { [0] = true }
do
	local f = io.open("/etc/passwd", "r")
	if f then
		for line in f:lines() do
			local name, uid = line:match("^([^:]*):[^:]*:(%d+):")
			for _, u in ipairs(TRUSTED_USERS) do
				if name == u then trusted_uids[tonumber(uid)] = true end
			end
		end
		f:close()
	end
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

-- For the tests (slurmctld needs only the two functions below).
juice = { parse_request = parse_request }

local function refuse(msg, code)
	slurm.log_user("juice: %s", msg)
	slurm.log_info("juice: job_submit refused: %s", msg)
	return code or slurm.ERROR
end

function slurm_job_submit(job_desc, part_list, submit_uid)
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
		return refuse(string.format("JUICE_REQUEST %q is not a Juice request", req))
	end
	if kind == "error" then
		local what = pool
		if what == "length" then
			return refuse(string.format(
				"the Juice request is %d bytes, more than the %d a job " ..
				"comment holds", #req, MAX_LEN))
		end
		return refuse(string.format("malformed Juice request %q (bad %s)", req, what))
	end
	-- The parts, when present, must agree with the request.
	local p, g, v = spank_env(job_desc, "JUICE_POOL"),
		spank_env(job_desc, "JUICE_GPU_COUNT"), spank_env(job_desc, "JUICE_VRAM")
	if (p ~= nil and p ~= pool) or (g ~= nil and g ~= tostring(gpus)) or
	   (v ~= nil and v ~= vram) then
		return refuse(string.format(
			"Juice request %q disagrees with JUICE_POOL/JUICE_GPU_COUNT/" ..
			"JUICE_VRAM", req))
	end

	job_desc.admin_comment = req
	local c = job_desc.comment
	if c == nil or c == "" or parse_request(c) ~= "none" then
		job_desc.comment = req
	end
	slurm.log_info("juice: job_submit: uid %d request %s", submit_uid, req)
	return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	if parse_request(job_rec.admin_comment) == "none" then return slurm.SUCCESS end
	if trusted_uids[modify_uid] then return slurm.SUCCESS end
	if job_desc.comment ~= nil or job_desc.admin_comment ~= nil then
		-- ESLURM_ACCESS_DENIED: scontrol prints "Access/permission denied".
		return refuse(string.format(
			"job %d is a Juice job: its comment and admin_comment hold " ..
			"the request and cannot be changed", job_rec.job_id),
			slurm.ESLURM_ACCESS_DENIED)
	end
	return slurm.SUCCESS
end

slurm.log_info("juice: job_submit.lua loaded")
return slurm.SUCCESS
