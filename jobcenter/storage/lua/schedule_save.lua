--[[ schedule_save: write a schedule's new firing state, decided in Python from what it read
  at one revision, only if the schedule is still at that revision. One transition for every
  change a decision makes: a tick's decision (next fire advanced, a fire pending, skips and
  misses counted), its confirmation (pending cleared, the fire counted), a pause, a resume.
  KEYS[1] schedule hash  KEYS[2] fires list  KEYS[3] schedules zset (unused here)
  KEYS[4] due zset  KEYS[5] name key (KEYS[1] again when the schedule has no name)
  ARGV[1] schedule id  ARGV[2] revision the decision read  ARGV[3] due ms ('' : not due)
  ARGV[4] retention ms ('' : it fires again; else it is done: its keys and name expire)
  ARGV[5] fire records kept  ARGV[6] n records
  ARGV[7..6+n] fire records (msgpack), oldest first: the list keeps the newest first
  ARGV[7+n..] field/value pairs of the new state ('' : field absent)
  Returns {0} saved | {-12} changed since that revision: nothing written, re-read and decide
          again | {-13} no such schedule (removed, or expired once done) ]]

local SCHEDULE, FIRES, DUE, NAME = KEYS[1], KEYS[2], KEYS[4], KEYS[5]
local id, read_rev, due, retention = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local kept, n = tonumber(ARGV[5]), tonumber(ARGV[6])

if redis.call('EXISTS', SCHEDULE) == 0 then return {SCHEDULE_GONE} end
if tonumber(redis.call('HGET', SCHEDULE,
  SCHEDULE_FIELD.REVISION) or 0) ~= read_rev then return {CHANGED} end

local set, unset, records = {}, {}, {}
for k = 7, 6 + n do records[#records + 1] = ARGV[k] end
for k = 7 + n, #ARGV - 1, 2 do
  if ARGV[k + 1] == '' then
    unset[#unset + 1] = ARGV[k]
  else
    set[#set + 1] = ARGV[k]
    set[#set + 1] = ARGV[k + 1]
  end
end

call_chunked('HSET', SCHEDULE, set)
call_chunked('HDEL', SCHEDULE, unset)
redis.call('HINCRBY', SCHEDULE, SCHEDULE_FIELD.REVISION, 1)
if n > 0 then
  call_chunked('LPUSH', FIRES, records)
  redis.call('LTRIM', FIRES, 0, kept - 1)
end
if due == '' then
  redis.call('ZREM', DUE, id)
else
  redis.call('ZADD', DUE, due, id)
end
if retention ~= '' then -- a finished one-time schedule is kept as long as a finished job
  redis.call('PEXPIRE', SCHEDULE, retention)
  redis.call('PEXPIRE', FIRES, retention)
  if NAME ~= SCHEDULE and redis.call('GET', NAME) == id then
    redis.call('PEXPIRE', NAME, retention)
  end
end
return {OK}
