--[[ start: reserved -> running: a new attempt of each task this handler reserved.
  KEYS: the job context (_job.lua)
  ARGV[A] handler id  ARGV[A+1..] task indexes
  Returns {0, {index, attempt, payload}...} | {-4} job gone (its reservations are dropped)
  A task reserved by another handler is skipped untouched; one no longer queued (cancelled)
  has its reservation dropped. ]]

local handler = ARGV[A]
if not load_job() then
  for k = A + 1, #ARGV do
    redis.call('ZREM', LEASES, lease_member(ARGV[k]))
    redis.call('HDEL', CLAIMS, lease_member(ARGV[k]))
  end
  return {-4}
end

local now = now_ms()
local started = {}
for k = A + 1, #ARGV do
  local i = ARGV[k]
  local lease = lease_member(i)
  if redis.call('HGET', CLAIMS, lease) == handler then
    redis.call('HDEL', CLAIMS, lease)
    local state = task_state(i)
    if state == T_QUEUED or state == T_RETRY_WAIT then
      local attempt = redis.call('HINCRBY', T, 'a:' .. i, 1)
      redis.call('HSET', T, 's:' .. i, T_RUNNING, 'h:' .. i, handler, 'ts:' .. i, now)
      started[#started + 1] = {tonumber(i), attempt, redis.call('HGET', T, 'p:' .. i)}
    else
      redis.call('ZREM', LEASES, lease)
    end
  end
end
if #started > 0 then redis.call('HSET', J, 'updated_at', now) end
return {0, started}
