--[[ delete: remove a finished job and every trace of it: its keys, its entries in the list
  indexes, its idempotency key and its dead letters.
  KEYS: the job context (_job.lua), then KEYS[XK] jobs zset  KEYS[XK+1] active zset
  KEYS[XK+2] owner's jobs zset (the job hash again when no owner)
  KEYS[XK+3] idempotency key (the job hash again when none)  KEYS[XK+4] expiring zset
  ARGV[A] the job's expiring member  ARGV[A+1..] indexes of its failed tasks (dead letters)
  Returns {0} | {-3} the job is not finished (cancel it first) | {-4} job gone ]]

if not load_job() then return {-4} end
if META.state ~= J_SUCCEEDED and META.state ~= J_FAILED and META.state ~= J_CANCELLED then
  return {-3}
end
for k = A + 1, #ARGV do redis.call('ZREM', DLQ, lease_member(ARGV[k])) end
redis.call('DEL', J, T, H, F)
redis.call('ZREM', KEYS[XK], JOB_ID)
redis.call('ZREM', KEYS[XK + 1], JOB_ID)
if KEYS[XK + 2] ~= J then redis.call('ZREM', KEYS[XK + 2], JOB_ID) end
if KEYS[XK + 3] ~= J then redis.call('DEL', KEYS[XK + 3]) end
redis.call('ZREM', KEYS[XK + 4], ARGV[A])
return {0}
