--[[ resubmit: recovery hands an unfinished job back to a leader: a split that lost its
  message, a cascade or release left half done, a finalize that never happened. The
  message is added only if none is pending (a duplicate would be dropped anyway).
  KEYS: the job context (_job.lua)
  ARGV[FIRST_OWN_ARG] kind: 'split' | 'continue' | 'finalize'
  Returns {0} added | {1} a message was pending already, or the job is finished | {-4} 
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it]]

local kind = ARGV[FIRST_OWN_ARG]
if not load_job() then return {META.refusal} end
if META.state == J_SUCCEEDED or META.state == J_FAILED or META.state == J_CANCELLED then
  return {ALREADY}
end
if redis.call('ZSCORE', LEADER, kind .. '|' .. JOB_ID) then return {ALREADY} end
leader_message(kind, now_ms())
OBS.emit(EVENT_KIND.REPAIRED, false, {EVENT_FIELD.DETAIL, 'resubmit_' .. kind})
OBS.count(METRIC_FIELD.REPAIRS .. '\t' .. 'resubmit_' .. kind)
OBS.flush_counts()
return {OK}
