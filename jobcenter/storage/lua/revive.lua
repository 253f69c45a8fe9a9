--[[ revive: run failed tasks again (a dead letter requeued, or `retry JOB`, in chunks): each
  root goes from failed back to queued with a fresh budget of attempts. Every task
  downstream of them that ended (succeeded, failed, upstream_failed or skipped: a cleanup
  that ran after the failure, an error handler) goes back to waiting too, to run again after
  its parents' new attempts (queued if its rule is met meanwhile), unless its trigger rule
  still fails or skips on its parents, counted with the tasks this call revives as not ended
  (a parent failed for good: not revived, or revived by an earlier chunk and failed again).
  Its parent counters are counted again from its parents' states; a task that ran gets a
  fresh budget of attempts and loses its result; a waiting child of a revived task stops
  counting how that parent ended (parent_ended counts it when it ends again).
  A finished job re-opens (running, no TTL) and is finalized again when its tasks end.
  All checks come first: a root not failed, a task to reset not ended or without its
  arguments (freed when its job ended succeeded: a retry of several calls stopped half way),
  a cancelled job, or a packed one (restore.lua first), and nothing is written.
  KEYS: the job context (_job.lua)
  ARGV[FIRST_OWN_ARG] number of roots  ARGV[FIRST_OWN_ARG+1..] root indexes  then for each task to
  reset (parents before children): its index, its number of parents, their indexes
  Returns {0, tasks revived} | {3} a failure cascade is under way: finish it ('continue')
          and call again | {-3, reason} | {-4} job gone | {-5} queues not passed 
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it]]

local PACKED = KEYS[14 + #JOB_STATES] -- the packed record (_job.lua)

if not load_job() then return {META.refusal} end
if not queues_passed() then return {KEYS_MISSING} end
if redis.call('HGET', JOB, JOB_FIELD.STOP) == 'cancel' then return {WRONG_STATE,
  'the job was cancelled'} end
if redis.call('EXISTS', FRONTIER) == 1 then return {BUSY} end
if redis.call('HEXISTS', JOB, JOB_FIELD.PACKED) == 1 then
  return {WRONG_STATE, 'the job is packed: restore it first (restore.lua)'}
end

local function not_in(i, want)
  return {WRONG_STATE, 'task ' .. (redis.call('HGET', TASKS,
    TF_ID .. i) or i) .. ' is not ' .. want}
end
-- what a task downstream of a root may have ended as, to be reset
local RESETTABLE = {[T_SUCCEEDED] = true, [T_FAILED] = true, [T_UPSTREAM_FAILED] = true,
  [T_SKIPPED] = true}
local nroots = tonumber(ARGV[FIRST_OWN_ARG])
local roots, resets, revived, verdicts, counts, ended = {}, {}, {}, {}, {}, {}
for k = FIRST_OWN_ARG + 1, FIRST_OWN_ARG + nroots do
  if task_state(ARGV[k]) ~= T_FAILED then return not_in(ARGV[k], T_FAILED) end
  roots[#roots + 1] = ARGV[k]
  revived[ARGV[k]] = true
  ended[ARGV[k]] = T_FAILED
end
local k = FIRST_OWN_ARG + 1 + nroots
while k <= #ARGV do
  local i, nparents = ARGV[k], tonumber(ARGV[k + 1])
  local state = task_state(i)
  if not RESETTABLE[state] then return not_in(i, 'ended') end
  if redis.call('HEXISTS', TASKS, TF_PAYLOAD .. i) == 0 then -- a retry of many calls stopped
    return {WRONG_STATE, 'task ' .. task_name(i) .. ' cannot run again: the job ended '
      .. 'succeeded meanwhile, which freed its arguments'}
  end
  local parents = count_parents(k + 2, k + 1 + nparents, revived)
  local verdict = parents_verdict(i, parents)
  if verdict ~= 'fail' and verdict ~= 'skip' then
    resets[#resets + 1] = i
    revived[i] = true
    verdicts[i], counts[i], ended[i] = verdict, parents, state
  end
  k = k + 2 + nparents
end
if #roots + #resets == 0 then return {OK, 0} end

-- Task i is alive again: a waiting child that counted how it ended (its dependencies left
-- when it succeeded; with a trigger rule or a parent skipped, its parents ended, failed and
-- skipped) counts it as not ended; a child in this call's resets is counted afresh below.
local function uncount_ended_parent(i)
  local csv = redis.call('HGET', TASKS, TF_CHILDREN .. i) or ''
  for c in string.gmatch(csv, '[^,]+') do
    if task_state(c) == T_WAITING then
      local counted = redis.call('HEXISTS', TASKS, TF_PARENTS_LEFT .. c) == 1
      if ended[i] == T_SUCCEEDED then redis.call('HINCRBY', TASKS, TF_DEPS_LEFT .. c, 1) end
      if counted then
        redis.call('HINCRBY', TASKS, TF_PARENTS_LEFT .. c, 1)
        if ended[i] == T_SKIPPED then
          redis.call('HINCRBY', TASKS, TF_PARENTS_SKIPPED .. c, -1)
        elseif ended[i] ~= T_SUCCEEDED then
          redis.call('HINCRBY', TASKS, TF_PARENTS_FAILED .. c, -1)
        end
      end
    end
  end
end

local now = now_ms()
if redis.call('HEXISTS', JOB, JOB_FIELD.TRIGGER_RULES) == 1 then -- else no such child exists
  for _, list in ipairs({roots, resets}) do
    for _, i in ipairs(list) do uncount_ended_parent(i) end
  end
end
-- a task that ran gets a fresh budget of attempts, as a root does
local function fresh_budget(i)
  local used = tonumber(redis.call('HGET', TASKS, TF_ATTEMPTS .. i) or 0)
  if used > 0 then redis.call('HSET', TASKS, TF_MAX_ATTEMPTS .. i, used + max_attempts(i)) end
end
local failed, skipped = #roots, 0 -- what the job's counters counted the revived tasks as
for _, i in ipairs(roots) do
  OBS.emit(EVENT_KIND.REVIVED, i)
  fresh_budget(i)
  redis.call('HDEL', TASKS, TF_FINISHED_AT .. i)
  redis.call('ZREM', DLQ, lease_member(i))
  enqueue(i, now)
end
for _, i in ipairs(resets) do
  OBS.emit(EVENT_KIND.REVIVED, i)
  if ended[i] == T_SKIPPED then skipped = skipped + 1 end
  if ended[i] == T_FAILED or ended[i] == T_UPSTREAM_FAILED then failed = failed + 1 end
  if ended[i] == T_FAILED then redis.call('ZREM', DLQ, lease_member(i)) end
  if ended[i] ~= T_UPSTREAM_FAILED then fresh_budget(i) end
  redis.call('HDEL', TASKS, TF_FINISHED_AT .. i, TF_ERROR .. i, TF_RESULT .. i)
  store_parent_counts(i, counts[i])
  if verdicts[i] == 'run' then
    enqueue(i, now) -- its rule was met while it was blocked: nothing else would release it
  else
    redis.call('HSET', TASKS, TF_STATE .. i, T_WAITING, TF_UPDATED_AT .. i, now)
  end
end
flush_wakes()
local n = #roots + #resets
redis.call('HINCRBY', JOB, JOB_FIELD.LEFT, n)
-- (never -0: Lua writes it '-0', which HINCRBY refuses)
if failed > 0 then redis.call('HINCRBY', JOB, JOB_FIELD.FAILED, -failed) end
if skipped > 0 then redis.call('HINCRBY', JOB, JOB_FIELD.SKIPPED, -skipped) end
local expiring = expiring_member()
set_job_state(J_RUNNING)
redis.call('HSET', JOB, JOB_FIELD.UPDATED_AT, now)
redis.call('HDEL', JOB, JOB_FIELD.FINISHED_AT, JOB_FIELD.STOP)
redis.call('ZREM', LEADER, 'finalize|' .. JOB_ID)
redis.call('ZREM', LEADER, 'compact|' .. JOB_ID) -- a compaction under way starts over
redis.call('DEL', PACKED)
redis.call('HDEL', JOB, JOB_FIELD.COMPACT_CURSOR)
for _, key in ipairs({JOB, TASKS, HISTORY, FRONTIER}) do redis.call('PERSIST', key) end
if IDEM ~= JOB then redis.call('PERSIST', IDEM) end
redis.call('ZADD', ACTIVE, redis.call('HGET', JOB, JOB_FIELD.CREATED_AT), JOB_ID)
redis.call('ZREM', EXPIRING, expiring)
if SLOT.archive then redis.call('ZREM', SLOT.archive, JOB_ID) end -- archived when it ends again
return {OK, n}
