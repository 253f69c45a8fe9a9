--[[ reconcile_slots: recovery's check of one shard's pool and limit slots against the
  leases (ARCHITECTURE.md, Recovery rule 9). A reservation that holds slots but has no lease
  any more (its end missed giving them back) gives them back; then every limit's count of
  used slots is set to what the remaining reservations hold. Bounded by the reservations
  alive: the slots hash holds one field per reservation with slots and per limit in use.
  KEYS[1] limits hash  KEYS[2] slots hash  KEYS[3] freed set  KEYS[4] freed wake list
  KEYS[5] leases zset
  ARGV[1] '1' to correct what is found, '0' only to count it
  Returns {0, reservations whose slots were (or would be) given back, counters corrected} ]]

local LIMITS, SLOTS, FREED, FREED_WAKE, LEASES = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local correct = ARGV[1] == '1'
local fields = redis.call('HGETALL', SLOTS)
local held, used = {}, {}
for f = 1, #fields, 2 do
  if string.find(fields[f], '|', 1, true) then
    held[fields[f]] = fields[f + 1]
  else
    used[fields[f]] = tonumber(fields[f + 1])
  end
end

local freed_slots = 0
local want, leaked = {}, {}
for lease, spec in pairs(held) do
  local alive = redis.call('ZSCORE', LEASES, lease)
  if not alive then freed_slots = freed_slots + 1 end
  for id, n in string.gmatch(spec, '([^;]+)%*(%d+)') do
    local sums = alive and want or leaked
    sums[id] = (sums[id] or 0) + tonumber(n)
  end
end
-- a counter is wrong if it differs from the live reservations once the leaked ones are
-- given back
local corrected = 0
local ids = {}
for id in pairs(used) do ids[id] = true end
for id in pairs(want) do ids[id] = true end
for id in pairs(ids) do
  if (used[id] or 0) - (leaked[id] or 0) ~= (want[id] or 0) then corrected = corrected + 1 end
end
if not correct then return {OK, freed_slots, corrected} end

for lease in pairs(held) do
  if not redis.call('ZSCORE', LEASES, lease) then SLOT.free_slots_of(LIMITS, SLOTS, FREED,
    FREED_WAKE, lease) end
end
for id in pairs(ids) do
  if tonumber(redis.call('HGET', SLOTS, id) or 0) ~= (want[id] or 0) then
    if want[id] then redis.call('HSET', SLOTS, id, want[id]) else redis.call('HDEL', SLOTS, id) end
    SLOT.mark_freed(LIMITS, FREED, FREED_WAKE, id, 1)
  end
end
return {OK, freed_slots, corrected}
