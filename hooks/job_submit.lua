--[[
job_submit.lua: the default job_submit.lua for a site that has none of its
own.  All the work is in the module juice_submit.lua beside it; a site with
its own job_submit.lua calls that module from its script instead (see the
head of juice_submit.lua, and test/site/job_submit.lua for an example).

Install both next to slurm.conf, with JobSubmitPlugins=lua.

A job_submit.lua that fails to load makes slurmctld refuse every job.  So the
module is loaded under pcall: when it is missing or broken, jobs that ask
nothing of Juice pass as before, and only jobs with a Juice request are
refused, with a message saying why.
]]

-- The module sits in this script's directory (slurmctld loads the script with
-- luaL_loadfile, so its source is "@/path/job_submit.lua").
local dir = debug.getinfo(1, "S").source:match("^@(.*/)[^/]*$") or "/etc/slurm/"
package.path = dir .. "?.lua;" .. package.path

local ok, juice = pcall(require, "juice_submit")
if not ok then
	slurm.log_error("juice: cannot load %sjuice_submit.lua: %s; jobs with a Juice request are refused",
		dir, tostring(juice))
	juice = nil
end

-- Does the job carry a Juice request in its SPANK environment (a table indexed
-- from 0)?  Only needed when the module is missing.
local function asks_juice(job_desc)
	for _, entry in pairs(job_desc.spank_job_env or {}) do
		if type(entry) == "string" and (entry:find("^JUICE_REQUEST=") or entry:find("^JUICE_POOL=")) then
			return true
		end
	end
	return false
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	if juice then return juice.job_submit(job_desc, part_list, submit_uid) end
	if asks_juice(job_desc) then
		slurm.log_user("juice: this cluster cannot take Juice jobs now (juice_submit.lua is missing); " ..
			"ask the administrators")
		return slurm.ERROR
	end
	return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	if juice then return juice.job_modify(job_desc, job_rec, part_list, modify_uid) end
	return slurm.SUCCESS
end

slurm.log_info("juice: job_submit.lua loaded (juice_submit %s)", juice and "loaded" or "MISSING")
return slurm.SUCCESS
