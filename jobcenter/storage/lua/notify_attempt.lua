--[[ notify_attempt: start an attempt at a delivery the caller claimed (notify_claim): count
  it, note who makes it, and renew its lease. An attempt that was under way and never
  reported (its deliverer died) is logged as lost first; a delivery that ended for an
  earlier outcome of the job (a retried job finalized again) starts over at attempt 1.
  KEYS[1] the shard's due notifications zset  KEYS[2] job hash  KEYS[3] the job's
  notifications hash  KEYS[4] its deliveries list
  ARGV[1] channel  ARGV[2] job id  ARGV[3] handler  ARGV[4] lease ms
  Returns {0, attempt} | {1} not due any more (another worker delivered it meanwhile)
          | {-4} the job is gone: its entry is dropped ]]

local DELIVERY_LOG_MAX = 100 -- attempts kept per job: far more than the retries allow
local channel, job_id, handler = ARGV[1], ARGV[2], ARGV[3]
local member = channel .. '|' .. job_id
if not redis.call('ZSCORE', KEYS[1], member) then return {ALREADY} end
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('ZREM', KEYS[1], member)
  return {JOB_GONE}
end

local now = now_ms()
local d = redis.call('HMGET', KEYS[3], DELIVERY_FIELD.STATE .. channel,
  DELIVERY_FIELD.ATTEMPTS .. channel,
  DELIVERY_FIELD.HANDLER .. channel, DELIVERY_FIELD.TRIED_AT .. channel)
local attempts = tonumber(d[2] or 0)
if d[1] == DELIVERY_STATE.DELIVERED or d[1] == DELIVERY_STATE.FAILED then attempts = 0 end
if d[1] == DELIVERY_STATE.DELIVERING then
  redis.call('RPUSH', KEYS[4], table.concat({channel, attempts, 'lost', d[3] or '', d[4] or '',
    now, 'no outcome within its lease (its worker stopped?): delivered again'}, '\t'))
  redis.call('LTRIM', KEYS[4], -DELIVERY_LOG_MAX, -1)
end
attempts = attempts + 1
redis.call('HSET', KEYS[3], DELIVERY_FIELD.STATE .. channel, DELIVERY_STATE.DELIVERING,
  DELIVERY_FIELD.ATTEMPTS .. channel, attempts,
  DELIVERY_FIELD.HANDLER .. channel, handler, DELIVERY_FIELD.TRIED_AT .. channel, now)
redis.call('HDEL', KEYS[3], DELIVERY_FIELD.NEXT_AT .. channel, DELIVERY_FIELD.DONE_AT .. channel)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[4]), member)
-- the delivery's record lives as long as its job
local ttl = redis.call('PTTL', KEYS[2])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[3], ttl)
  if redis.call('EXISTS', KEYS[4]) == 1 then redis.call('PEXPIRE', KEYS[4], ttl) end
end
return {OK, attempts}
