--[[ save_logs: store attempts' logs (runtime/tasklogs.py) in the job's logs hash, which
  expires with the job: the job's own TTL once it has one (finished), else its retention
  from now (each later write pushes it on, the last one comes with the job's end).
  KEYS[1] job hash  KEYS[2] the job's logs hash
  ARGV[1] the namespace's retention (ms), for a job that names none
  ARGV[2..] groups of four: the attempt's field, its live field, 1 for the attempt's final
            log (it replaces the live one) or 0 for a running attempt's log so far (not
            written once the final one is there), the log
  Returns {0} | {-4} no such job: nothing written ]]

if redis.call('EXISTS', KEYS[1]) == 0 then return {JOB_GONE} end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  ttl = tonumber(redis.call('HGET', KEYS[1], JOB_FIELD.RETENTION) or ARGV[1])
end
for k = 2, #ARGV, 4 do
  local field, live, final, log = ARGV[k], ARGV[k + 1], ARGV[k + 2], ARGV[k + 3]
  if final == '1' then
    redis.call('HSET', KEYS[2], field, log)
    redis.call('HDEL', KEYS[2], live)
  elseif redis.call('HEXISTS', KEYS[2], field) == 0 then
    redis.call('HSET', KEYS[2], live, log)
  end
end
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('PEXPIRE', KEYS[2], ttl) end
return {OK}
