--[[
A site's own job_submit.lua that also runs juice-slurm's module: what an
administrator with a job_submit.lua of their own writes.  Used by the tests
(spank/test/test_job_submit.lua, and TestSiteJobSubmitCallsTheModule in
test/e2e on the real slurmctld).

The site's own rules here, to show they still apply beside Juice's:
  * a job without a time limit gets 7 minutes;
  * a job named "site-refuses-this" is refused with the site's message.
]]

package.path = "/etc/slurm/?.lua;" .. package.path
local juice = require("juice_submit")

function slurm_job_submit(job_desc, part_list, submit_uid)
	if job_desc.name == "site-refuses-this" then
		slurm.log_user("site: jobs of that name are not allowed here")
		return slurm.ERROR
	end
	if job_desc.time_limit == nil or job_desc.time_limit == slurm.NO_VAL then
		job_desc.time_limit = 7
	end
	return juice.job_submit(job_desc, part_list, submit_uid)
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	return juice.job_modify(job_desc, job_rec, part_list, modify_uid)
end

slurm.log_info("site job_submit.lua loaded (with juice_submit)")
return slurm.SUCCESS
