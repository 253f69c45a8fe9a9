--[[ notify_done: the outcome of a delivery attempt: delivered; failed with another attempt
  due after a delay; or failed for good. Logged in the job's deliveries list either way.
  KEYS[1] the shard's due notifications zset  KEYS[2] job hash  KEYS[3] the job's
  notifications hash  KEYS[4] its deliveries list
  ARGV[1] channel  ARGV[2] job id  ARGV[3] attempt  ARGV[4] handler  ARGV[5] 1 delivered,
  0 failed  ARGV[6] what happened (the error, or the endpoint's answer)  ARGV[7] ms until
  the next attempt, -1 to give up
  Returns {0, delivery state} | {-2} not the attempt under way (its lease ran out and
          another worker took the delivery over): nothing recorded ]]

local DELIVERY_LOG_MAX = 100 -- attempts kept per job: far more than the retries allow
local channel, job_id, attempt, handler = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local delivered, detail, retry_ms = ARGV[5] == '1', ARGV[6], tonumber(ARGV[7])
local member = channel .. '|' .. job_id
local d = redis.call('HMGET', KEYS[3], DELIVERY_FIELD.STATE .. channel,
  DELIVERY_FIELD.ATTEMPTS .. channel,
  DELIVERY_FIELD.HANDLER .. channel, DELIVERY_FIELD.TRIED_AT .. channel)
if d[1] ~= DELIVERY_STATE.DELIVERING or d[2] ~= attempt or d[3] ~= handler then return {STALE_TOKEN} end

local now = now_ms()
local state = DELIVERY_STATE.DELIVERED
if not delivered then
  if retry_ms >= 0 then state = DELIVERY_STATE.RETRYING else state = DELIVERY_STATE.FAILED end
end
redis.call('RPUSH', KEYS[4], table.concat({channel, attempt, state, handler, d[4] or '', now,
  detail}, '\t'))
redis.call('LTRIM', KEYS[4], -DELIVERY_LOG_MAX, -1)
local ttl = redis.call('PTTL', KEYS[3])
if ttl > 0 then redis.call('PEXPIRE', KEYS[4], ttl) end
redis.call('HSET', KEYS[3], DELIVERY_FIELD.STATE .. channel, state)
if delivered then
  redis.call('HDEL', KEYS[3], DELIVERY_FIELD.ERROR .. channel)
else
  redis.call('HSET', KEYS[3], DELIVERY_FIELD.ERROR .. channel, detail)
end
if state == DELIVERY_STATE.RETRYING then
  redis.call('HSET', KEYS[3], DELIVERY_FIELD.NEXT_AT .. channel, now + retry_ms)
  redis.call('ZADD', KEYS[1], now + retry_ms, member)
else
  redis.call('HSET', KEYS[3], DELIVERY_FIELD.DONE_AT .. channel, now)
  redis.call('ZREM', KEYS[1], member)
end
return {OK, state}
