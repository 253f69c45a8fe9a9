--[[ queue_pause: pause a queue in one shard (the caller calls it for every shard): claims
  and completions take nothing of it until it is resumed; running attempts finish. Or
  resume it, waking its idle workers.
  KEYS[1] limits hash  KEYS[2] the queue's wake list
  ARGV[1] queue name  ARGV[2] '1' to pause, '0' to resume
  Returns {0} done | {1} paused (or not paused) already ]]

local field = LIMIT_FIELD.PAUSED_QUEUE .. ARGV[1]
local paused = redis.call('HEXISTS', KEYS[1], field) == 1
if paused == (ARGV[2] == '1') then return {ALREADY} end
if ARGV[2] == '1' then
  redis.call('HSET', KEYS[1], field, now_ms())
else
  redis.call('HDEL', KEYS[1], field)
  wake(KEYS[2], WAKE_TOKENS_MAX)
end
return {OK}
