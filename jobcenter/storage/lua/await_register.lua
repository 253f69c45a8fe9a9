--[[ await_register: a task of job WAITER waits for job TARGET (`wait_for: {job: ...}`, or a
  schedule's run once found). Unless TARGET has ended, WAITER joins TARGET's awaiters and
  TARGET is marked awaited, so the script that ends it posts a 'waiters' leader message
  (finalize_job, _cascade.lua). Its state and the registration are one step in TARGET's shard:
  no end falls between them, whichever shard WAITER is in.
  KEYS[1] TARGET's job hash  KEYS[2] its awaiters set
  ARGV[1] WAITER's job id
  Returns {0, TARGET's state}: '' no such job and a final state register nothing (the caller
          settles the wait itself); any other state registered it ]]

local state = redis.call('HGET', KEYS[1], JOB_FIELD.STATE)
if not state then return {OK, ''} end
if state == J_SUCCEEDED or state == J_FAILED or state == J_CANCELLED then return {OK, state} end
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], JOB_FIELD.AWAITED, 1)
return {OK, state}
