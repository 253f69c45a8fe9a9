--[[ finalize: the leader closes a job whose tasks are all terminal: succeeded only if every
  task succeeded; cancelled if a user cancelled it; else failed. Sets the retention TTLs.
  KEYS: the job context (_job.lua), then KEYS[XK] active jobs zset
  KEYS[XK+1] idempotency key (the job hash again when there is none)
  KEYS[XK+2] expiring zset (what recovery trims from the list indexes, and when)
  ARGV[A] default retention ms  ARGV[A+1] 1 if KEYS[XK+1] is an idempotency key
  ARGV[A+2] the job's expiring member "<job>\t<owner>"
  Returns {0, state} | {1, state} finalized already | {2} tasks still unfinished | {-4} ]]

local message = 'finalize|' .. JOB_ID
if not load_job() then
  redis.call('ZREM', LEADER, message)
  return {-4}
end
local j = redis.call('HMGET', J, 'left', 'nfailed', 'stop', 'retention')
if META.state == J_SUCCEEDED or META.state == J_FAILED or META.state == J_CANCELLED then
  redis.call('ZREM', LEADER, message)
  return {1, META.state}
end
if tonumber(j[1] or 1) > 0 then
  redis.call('ZREM', LEADER, message)
  return {2}
end

local now = now_ms()
local state = J_SUCCEEDED
if j[3] == 'cancel' then state = J_CANCELLED elseif tonumber(j[2]) > 0 then state = J_FAILED end
redis.call('HSET', J, 'state', state, 'finished_at', now, 'updated_at', now)
redis.call('ZREM', KEYS[XK], JOB_ID)
redis.call('ZREM', LEADER, message)
local retention = tonumber(j[4] or ARGV[A])
for _, key in ipairs({J, T, H, F}) do redis.call('PEXPIRE', key, retention) end
if ARGV[A + 1] == '1' then redis.call('PEXPIRE', KEYS[XK + 1], retention) end
redis.call('ZADD', KEYS[XK + 2], now + retention, ARGV[A + 2])
return {0, state}
