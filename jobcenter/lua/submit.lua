--[[ submit: store a validated job as `pending` and hand it to a leader to split.
  KEYS[1] job hash  KEYS[2] idempotency key (the job hash again when there is none)
  KEYS[3] shard sequence counter  KEYS[4] jobs zset  KEYS[5] active jobs zset
  KEYS[6] owner's jobs zset (the job hash again when there is no owner)
  KEYS[7] leader zset  KEYS[8] leader wake list
  ARGV[1] job id  ARGV[2] 1 if KEYS[2] is an idempotency key  ARGV[3] 1 if KEYS[6] is an
  owner zset  ARGV[4..] field, value pairs for the job hash
  Returns {0, job id} created | {1, job id} the idempotency key names an existing job
          | {-3} a job with this id exists already ]]

local job_id = ARGV[1]
if ARGV[2] == '1' then
  local existing = redis.call('GET', KEYS[2])
  if existing then return {1, existing} end
end
if redis.call('EXISTS', KEYS[1]) == 1 then return {-3} end

local now = now_ms()
local seq = redis.call('INCR', KEYS[3])
local fields = {}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], 'id', job_id, 'state', J_PENDING, 'seq', seq,
  'created_at', now, 'updated_at', now, 'nfailed', 0, 'ncancelled', 0, unpack(fields))
if ARGV[2] == '1' then redis.call('SET', KEYS[2], job_id) end
redis.call('ZADD', KEYS[4], now, job_id)
redis.call('ZADD', KEYS[5], now, job_id)
if ARGV[3] == '1' then redis.call('ZADD', KEYS[6], now, job_id) end
redis.call('ZADD', KEYS[7], now, 'split|' .. job_id)
wake(KEYS[8], 1)
return {0, job_id}
