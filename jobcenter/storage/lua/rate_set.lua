--[[ rate_set: set a queue's or a pool's rate limit in one shard (the CLI calls it for every
  shard), or delete it. The window under way keeps its count: a lower rate applies at once.
  A pool's waiting tasks are looked at again by the next claim (a higher rate may let them).
  KEYS[1] limits hash  KEYS[2] freed set  KEYS[3] freed wake list
  ARGV[1] the queue name, or the pool's limit id "p:<pool>"  ARGV[2] "<starts>/<period ms>",
  or '' to delete the limit
  Returns {0} ]]

local LIMITS, FREED, FREED_WAKE = KEYS[1], KEYS[2], KEYS[3]
if ARGV[2] == '' then
  redis.call('HDEL', LIMITS, LIMIT_FIELD.RATE .. ARGV[1], LIMIT_FIELD.RATE_WINDOW .. ARGV[1])
else
  redis.call('HSET', LIMITS, LIMIT_FIELD.RATE .. ARGV[1], ARGV[2])
end
SLOT.mark_freed(LIMITS, FREED, FREED_WAKE, ARGV[1], 1) -- a queue name has no parked tasks: a no-op
return {OK}
