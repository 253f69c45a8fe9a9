--[[ notify_claim: take due notification deliveries of one shard, each leased: moved one
  lease ahead, so a deliverer that dies leaves it due again for any worker to take.
  KEYS[1] the shard's due notifications zset ("<channel>|<job>" -> due ms)
  ARGV[1] lease ms  ARGV[2] how many at most
  Returns {members...}: the deliveries now the caller's to attempt (notify_attempt) ]]

local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, member in ipairs(due) do
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), member)
end
return due
