--[[ rate_set: set a queue's rate limit in one shard (the CLI calls it for every shard), or
  delete it. The window under way keeps its count: a lower rate applies at once.
  KEYS[1] limits hash
  ARGV[1] queue name  ARGV[2] "<starts>/<period ms>", or '' to delete the limit
  Returns {0} ]]

local LIMITS = KEYS[1]
if ARGV[2] == '' then
  redis.call('HDEL', LIMITS, LF.RATE .. ARGV[1], LF.RATE_WINDOW .. ARGV[1])
else
  redis.call('HSET', LIMITS, LF.RATE .. ARGV[1], ARGV[2])
end
return {OK}
