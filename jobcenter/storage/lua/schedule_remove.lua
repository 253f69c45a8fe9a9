--[[ schedule_remove: delete a schedule, its fire records, its index entries and its name.
  The jobs it submitted are untouched; a fire decided but not yet confirmed goes with it
  (its confirmation then finds no schedule; a job submitted for it stays).
  KEYS[1] schedule hash  KEYS[2] fires list  KEYS[3] schedules zset  KEYS[4] due zset
  KEYS[5] name key (KEYS[1] again when the schedule has no name)
  ARGV[1] schedule id
  Returns {0} removed | {-13} no such schedule ]]

local SCHEDULE, FIRES, SCHEDULES, DUE, NAME = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id = ARGV[1]

if redis.call('EXISTS', SCHEDULE) == 0 then return {SCHEDULE_GONE} end
local named = NAME ~= SCHEDULE and redis.call('GET', NAME) == id

redis.call('DEL', SCHEDULE, FIRES)
redis.call('ZREM', SCHEDULES, id)
redis.call('ZREM', DUE, id)
if named then redis.call('DEL', NAME) end
return {OK}
