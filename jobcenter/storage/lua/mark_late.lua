--[[ mark_late: recovery found the job unfinished past its sla: say so once (the job's `late`
  field, a `late` event,
  a notification if its `notify:` asks for one); the job goes on.
  KEYS: the job context (_job.lua)
  Returns {0} marked | {1} finished, or marked already | {-4} job gone
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it ]]

if not load_job() then return {META.refusal} end
if META.state == J_SUCCEEDED or META.state == J_FAILED or META.state == J_CANCELLED then
  return {ALREADY}
end
if redis.call('HSETNX', JOB, JOB_FIELD.LATE, now_ms()) == 0 then return {ALREADY} end
OBS.emit(EVENT_KIND.LATE, false)
queue_notice(NOTICE.LATE, ':' .. NOTICE.LATE, now_ms()) -- spec `notify:` `on: [late]`
return {OK}
