--[[ archive_status: record how an archive write went (the dashboard's warning), in the order
  the outcomes were seen, not the order they arrive: processes archive side by side, and a
  write refused while the database was down may be reported after another's write worked
  once it was back. An outcome seen before the last one recorded changes nothing.
  KEYS[1] the archive status hash
  ARGV[1] when the outcome was seen (ms, Redis time, read once the write returned or failed)
  ARGV[2] its error; '' when it worked (the warning is cleared)
  Returns {0} recorded | {1} an outcome seen later was recorded already: nothing written ]]

local seen = tonumber(ARGV[1])
local s = redis.call('HMGET', KEYS[1], ARCHIVE_STATUS_FIELD.AT, ARCHIVE_STATUS_FIELD.WORKED_AT)
if seen < math.max(tonumber(s[1] or 0), tonumber(s[2] or 0)) then return {ALREADY} end
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], ARCHIVE_STATUS_FIELD.ERROR, ARCHIVE_STATUS_FIELD.AT)
  redis.call('HSET', KEYS[1], ARCHIVE_STATUS_FIELD.WORKED_AT, ARGV[1])
else
  redis.call('HSET', KEYS[1], ARCHIVE_STATUS_FIELD.ERROR, ARGV[2], ARCHIVE_STATUS_FIELD.AT, ARGV[1])
end
return {OK}
