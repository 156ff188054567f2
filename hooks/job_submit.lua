--[[
job_submit.lua: juice-slurm's bridge from the SPANK plugin to the job record.

Install: next to slurm.conf (re-read when its mtime changes), with
  JobSubmitPlugins=lua

At submission the juice SPANK plugin (srun/sbatch/salloc) validated the
--juice-* options and put JUICE_REQUEST (plus JUICE_POOL, JUICE_GPU_COUNT,
JUICE_VRAM) into the job's spank_job_env.  Here, in slurmctld:
  * the request's shape is checked again, strictly;
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

-- Parse "juice:v1:pool=P,gpus=N[,vram=B]" strictly (test/vectors/README.md
-- section 3).  Returns pool, gpus, vram (vram nil when absent) or nil.
local function parse_request(req)
	local pool, gpus, vram = req:match(
		"^juice:v1:pool=([A-Za-z0-9][A-Za-z0-9._-]*),gpus=([1-9]%d*),vram=([1-9]%d*)$")
	if pool == nil then
		pool, gpus = req:match(
			"^juice:v1:pool=([A-Za-z0-9][A-Za-z0-9._-]*),gpus=([1-9]%d*)$")
	end
	if pool == nil or #pool > POOL_MAX or #gpus > 4 then return nil end
	if vram ~= nil and (#vram > 20 or gpus ~= "1") then return nil end
	return pool, gpus, vram
end

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
	if #req > MAX_LEN then
		return refuse(string.format(
			"the Juice request is %d bytes, more than the %d a job " ..
			"comment holds", #req, MAX_LEN))
	end
	local pool, gpus, vram = parse_request(req)
	if pool == nil then
		return refuse(string.format("malformed Juice request %q", req))
	end
	-- The parts, when present, must agree with the request.
	local p, g, v = spank_env(job_desc, "JUICE_POOL"),
		spank_env(job_desc, "JUICE_GPU_COUNT"), spank_env(job_desc, "JUICE_VRAM")
	if (p ~= nil and p ~= pool) or (g ~= nil and g ~= gpus) or
	   (v ~= nil and v ~= vram) then
		return refuse(string.format(
			"Juice request %q disagrees with JUICE_POOL/JUICE_GPU_COUNT/" ..
			"JUICE_VRAM", req))
	end

	job_desc.admin_comment = req
	local c = job_desc.comment
	if c == nil or c == "" or c:sub(1, #PREFIX) == PREFIX then
		job_desc.comment = req
	end
	slurm.log_info("juice: job_submit: uid %d request %s", submit_uid, req)
	return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	local ac = job_rec.admin_comment
	if ac == nil or ac:sub(1, #PREFIX) ~= PREFIX then return slurm.SUCCESS end
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
