--[[ pool_set: set a pool's slot count in one shard (the CLI calls it for every shard), or
  delete the pool. Tasks parked for the pool are put back by the next claim once it has room.
  KEYS[1] limits hash  KEYS[2] slots hash  KEYS[3] freed set  KEYS[4] freed wake list
  ARGV[1] pool name  ARGV[2] slot count, or '' to delete the pool
  Returns {0} | {-3} delete refused: the pool's slots are in use or tasks wait for it ]]

local LIMITS, SLOTS, FREED, FREED_WAKE = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id = LIMIT_KIND.POOL .. ARGV[1]
if ARGV[2] == '' then
  if redis.call('HEXISTS', SLOTS, id) == 1 or redis.call('HEXISTS', LIMITS,
    LIMIT_FIELD.PARKED .. id) == 1 then
    return {WRONG_STATE}
  end
  redis.call('HDEL', LIMITS, LIMIT_FIELD.POOL_TOTAL .. ARGV[1])
  return {OK}
end
redis.call('HSET', LIMITS, LIMIT_FIELD.POOL_TOTAL .. ARGV[1], ARGV[2])
SLOT.mark_freed(LIMITS, FREED, FREED_WAKE, id, tonumber(ARGV[2]))
return {OK}
