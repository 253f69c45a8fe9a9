--[[ lost: settle a job whose keys Redis lost (evicted under a maxmemory-policy other than
  noeviction, or deleted by hand), so that no job shows running for ever (ARCHITECTURE.md,
  Recovery rule 11). Each case is checked here:
  - the job hash is gone while the active index or the pending or running index still lists
    the job: a job hash is written in its place, failed, its error naming the lost key, with
    the retention TTL; what is left of its other keys goes (no script runs a task without
    its job hash), and it leaves the indexes of unfinished jobs for the failed one
  - the job hash is there, unfinished, but its tasks were lost (tasks_lost, _job.lua): the
    job ends failed, or cancelled under a user's cancel, its error naming the tasks hash
  KEYS: the job context (_job.lua)
  Returns {0, state} settled: the job's state now | {1} nothing was lost | {-5}
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it]]

local PACKED = KEYS[14 + #JOB_STATES] -- the packed record (_job.lua)
local now = now_ms()

if not load_job() and META.refusal == NEWER_PROTOCOL then return {NEWER_PROTOCOL} end
if not META.state then
  local created = redis.call('ZSCORE', ACTIVE, JOB_ID)
  for _, state in ipairs({J_PENDING, J_RUNNING}) do
    created = created or redis.call('ZSCORE', STATE_INDEX[state], JOB_ID)
  end
  if not created then return {ALREADY} end -- finished and expired, deleted, or never there
  local err = 'lost: Redis no longer holds the job hash ' .. JOB
    .. ' (evicted? jobcenter needs maxmemory-policy noeviction)'
  redis.call('ZREM', ACTIVE, JOB_ID)
  redis.call('ZREM', STATE_INDEX[J_PENDING], JOB_ID)
  redis.call('ZREM', STATE_INDEX[J_RUNNING], JOB_ID)
  for _, kind in ipairs({'split', 'continue', 'cancel', 'finalize'}) do
    redis.call('ZREM', LEADER, kind .. '|' .. JOB_ID)
  end
  redis.call('DEL', TASKS, HISTORY, FRONTIER, PACKED)
  redis.call('HSET', JOB, JOB_FIELD.ID, JOB_ID, JOB_FIELD.STATE, J_FAILED, JOB_FIELD.ERROR, err,
    JOB_FIELD.TASKS, 0,
    JOB_FIELD.LEFT, 0, JOB_FIELD.CREATED_AT, created, JOB_FIELD.FINISHED_AT, now,
      JOB_FIELD.UPDATED_AT, now)
  redis.call('ZADD', STATE_INDEX[J_FAILED], created, JOB_ID)
  -- its owner and schedule were in the lost hash: trimming drops it from the other indexes
  redis.call('PEXPIRE', JOB, DEFAULT_RETENTION_MS)
  redis.call('ZADD', EXPIRING, now + DEFAULT_RETENTION_MS, JOB_ID .. '\t\t')
  OBS.emit(EVENT_KIND.REPAIRED, false, {EVENT_FIELD.DETAIL, 'lost', EVENT_FIELD.ERROR,
    string.sub(err, 1, OBS.error_max)})
  OBS.count(METRIC_FIELD.REPAIRS .. '\tlost')
  OBS.flush_counts()
  return {OK, J_FAILED}
end
if not queues_passed() then return {KEYS_MISSING} end
if not tasks_lost() then return {ALREADY} end
return {OK, settle_lost(now)}
