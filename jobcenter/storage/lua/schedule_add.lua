--[[ schedule_add: store a new schedule: its definition and first firing state (revision 1),
  its entries in the schedule index and the due index, and its name.
  KEYS[1] schedule hash  KEYS[2] fires list (unused here)  KEYS[3] schedules zset
  KEYS[4] due zset  KEYS[5] name key (KEYS[1] again when the schedule has no name)
  ARGV[1] schedule id  ARGV[2] created ms  ARGV[3] due ms ('' : not due)
  ARGV[4..] field/value pairs of the hash: 'def' (msgpack) and the state ('' : field absent)
  Returns {0} added | {-11, id} the name belongs to schedule `id` already ]]

local SCHEDULE, SCHEDULES, DUE, NAME = KEYS[1], KEYS[3], KEYS[4], KEYS[5]
local id, created, due = ARGV[1], ARGV[2], ARGV[3]
local named = NAME ~= SCHEDULE

if named then
  local holder = redis.call('GET', NAME)
  if holder then return {NAME_TAKEN, holder} end
end

local fields = {}
for k = 4, #ARGV - 1, 2 do
  if ARGV[k + 1] ~= '' then
    fields[#fields + 1] = ARGV[k]
    fields[#fields + 1] = ARGV[k + 1]
  end
end
call_chunked('HSET', SCHEDULE, fields)
redis.call('HSET', SCHEDULE, SCHEDULE_FIELD.REVISION, 1)
redis.call('ZADD', SCHEDULES, created, id)
if due ~= '' then redis.call('ZADD', DUE, due, id) end
if named then redis.call('SET', NAME, id) end
return {OK}
