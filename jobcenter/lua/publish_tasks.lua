--[[ publish_tasks: the leader writes one chunk of a pending job's tasks (split step 1).
  Chunks are numbered by a cursor, so a leader that took over after a crash goes on where
  the last one stopped, and two leaders never write the same chunk twice.
  KEYS: the job context (_job.lua)
  ARGV[A] handler id  ARGV[A+1] leader step timeout ms  ARGV[A+2] tasks written before
  this chunk  ARGV[A+3] tasks written after it  ARGV[A+4..] field, value pairs (tasks hash)
  Returns {0} | {-3} job not pending | {-4} job gone | {-6} another leader moved the cursor ]]

local HSET_ARGS_MAX = 4000 -- arguments per HSET call: stays clear of Lua's unpack limit

if not load_job() then return {-4} end
if META.state ~= J_PENDING or redis.call('HGET', J, 'stop') then return {-3} end
if tonumber(redis.call('HGET', J, 'written') or 0) ~= tonumber(ARGV[A + 2]) then return {-6} end

local now = now_ms()
local args = {}
for k = A + 4, #ARGV do
  args[#args + 1] = ARGV[k]
  if #args == HSET_ARGS_MAX then
    redis.call('HSET', T, unpack(args))
    args = {}
  end
end
if #args > 0 then redis.call('HSET', T, unpack(args)) end
redis.call('HSET', J, 'written', ARGV[A + 3], 'leader', ARGV[A], 'updated_at', now)
redis.call('ZADD', LEADER, now + tonumber(ARGV[A + 1]), 'split|' .. JOB_ID)
return {0}
