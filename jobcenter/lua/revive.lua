--[[ revive: run failed tasks again (a dead letter requeued, or `retry JOB`): each root goes
  from failed back to queued with a fresh budget of attempts, and the upstream_failed tasks
  the caller computed as blocked only by those roots go back to waiting. Their dependency
  counters need no change: a counter only ever counts parents not yet succeeded. A finished
  job re-opens (running, no TTL) and is finalized again when its tasks end.
  All checks come first: one task not in the state named, a cascade still under way, or a
  cancelled job, and nothing is written.
  KEYS: the job context (_job.lua)
  ARGV[A] number of roots  ARGV[A+1..] root indexes  then the indexes to reset to waiting
  Returns {0, tasks revived} | {-3, reason} | {-4} job gone | {-5} queues not passed ]]

if not load_job() then return {-4} end
if not queues_passed() then return {-5} end
local nroots = tonumber(ARGV[A])
local first_reset = A + 1 + nroots
if redis.call('HGET', J, 'stop') == 'cancel' then return {-3, 'the job was cancelled'} end
if redis.call('EXISTS', F) == 1 then return {-3, 'a failure cascade is still under way'} end
for k = A + 1, #ARGV do
  local want = k < first_reset and T_FAILED or T_UPSTREAM_FAILED
  if task_state(ARGV[k]) ~= want then
    return {-3, 'task ' .. (redis.call('HGET', T, 'id:' .. ARGV[k]) or ARGV[k]) .. ' is not ' .. want}
  end
end

local now = now_ms()
for k = first_reset, #ARGV do
  redis.call('HSET', T, 's:' .. ARGV[k], T_WAITING)
  redis.call('HDEL', T, 'tf:' .. ARGV[k], 'e:' .. ARGV[k])
end
for k = A + 1, first_reset - 1 do
  local i = ARGV[k]
  local used = tonumber(redis.call('HGET', T, 'a:' .. i) or 0)
  redis.call('HSET', T, 'm:' .. i, used + max_attempts(i))
  redis.call('HDEL', T, 'tf:' .. i)
  redis.call('ZREM', DLQ, lease_member(i))
  enqueue(i, now)
end
flush_wakes()
local revived = #ARGV - A
redis.call('HINCRBY', J, 'left', revived)
redis.call('HINCRBY', J, 'nfailed', -revived)
local expiring = expiring_member()
set_job_state(J_RUNNING)
redis.call('HSET', J, 'updated_at', now)
redis.call('HDEL', J, 'finished_at', 'stop')
redis.call('ZREM', LEADER, 'finalize|' .. JOB_ID)
for _, key in ipairs({J, T, H, F}) do redis.call('PERSIST', key) end
if IDEM ~= J then redis.call('PERSIST', IDEM) end
redis.call('ZADD', ACTIVE, redis.call('HGET', J, 'created_at'), JOB_ID)
redis.call('ZREM', EXPIRING, expiring)
return {0, revived}
