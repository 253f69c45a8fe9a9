--[[ compact: free the working fields of a large succeeded job in bounded chunks (small ones
  are compacted by the transition that finalizes them); its record and history stay.
  KEYS: the job context (_job.lua)
  Returns {0, tasks still to compact} | {1} nothing to do (not succeeded, or done) | {-4} ]]

local COMPACT_CHUNK = 1000 -- tasks per call: 6,000 fields deleted, a few ms

local message = 'compact|' .. JOB_ID
if not load_job() then
  redis.call('ZREM', LEADER, message)
  return {JOB_GONE}
end
local n = tonumber(redis.call('HGET', J, JF.TASKS))
local cursor = tonumber(redis.call('HGET', J, JF.COMPACT_CURSOR) or 0)
if META.state ~= J_SUCCEEDED or cursor >= n then
  redis.call('ZREM', LEADER, message)
  return {ALREADY}
end

local upto = math.min(n, cursor + COMPACT_CHUNK)
local fields = {}
for i = cursor, upto - 1 do
  for _, prefix in ipairs(WORKING_FIELDS) do fields[#fields + 1] = prefix .. i end
end
call_chunked('HDEL', T, fields)
redis.call('HSET', J, JF.COMPACT_CURSOR, upto)
if upto >= n then redis.call('ZREM', LEADER, message) end
return {OK, n - upto}
