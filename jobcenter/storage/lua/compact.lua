--[[ compact: pack a large finished job's tasks and history into its packed record, a chunk
  per call (small jobs are packed by the transition that finalizes them); the last chunk
  deletes the tasks hash and the history. A succeeded job's working fields are left out.
  KEYS: the job context (_job.lua)
  Returns {0, tasks + history entries still to pack} | {1} nothing to do (not finished, a
  cascade still under way, or packed already) | {-4} ]]

local message = 'compact|' .. JOB_ID
if not load_job() then
  redis.call('ZREM', LEADER, message)
  return {JOB_GONE}
end
if not FINISHED[META.state] or redis.call('EXISTS', F) == 1
    or redis.call('HEXISTS', J, JF.PACKED) == 1 then
  redis.call('ZREM', LEADER, message) -- the frontier's last 'continue' posts it again
  return {ALREADY}
end
local left = compact_step(COMPACT_CHUNK, HISTORY_CHUNK)
if left == 0 then redis.call('ZREM', LEADER, message) end
return {OK, left}
