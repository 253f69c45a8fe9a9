--[[ _reset: ended tasks put back to run again, prepended after _data.lua to the scripts that
  do it: revive (retry, dlq requeue), clear and mark. A task to reset comes in ARGV as its
  index, its number of parents and their indexes, parents before children. RESET.read checks
  them all and decides each one's fate (reads only); RESET.uncount, RESET.apply and
  RESET.reopen_job write. A repair gets it too, for the parent counts it decides a waiting
  task by (count_parents). ]]

-- Parents of task c (indexes ARGV[first..last]) counted from their states, for a repair or
-- a revive: {np, d, u, nf, nk}; a parent in `reviving` counts as not ended. Reads only.
local FAILED_ENDS = {[T_FAILED] = true, [T_UPSTREAM_FAILED] = true, [T_CANCELLED] = true}
local function count_parents(first, last, reviving)
  local d, u, nf, nk = 0, 0, 0, 0 -- as in rule_verdict
  for k = first, last do
    local p = ARGV[k]
    local state = task_state(p)
    if reviving[p] or state ~= T_SUCCEEDED then d = d + 1 end -- it is to succeed again
    if reviving[p] or not (state == T_SUCCEEDED or state == T_SKIPPED or FAILED_ENDS[state]) then
      u = u + 1
    elseif state == T_SKIPPED then
      nk = nk + 1
    elseif state ~= T_SUCCEEDED then
      nf = nf + 1
    end
  end
  return {np = last - first + 1, d = d, u = u, nf = nf, nk = nk}
end

-- The verdict of task c's rule on counts from count_parents, and the rule.
local function parents_verdict(c, counts)
  local rule = redis.call('HGET', TASKS, TF_TRIGGER_RULE .. c) or R_ALL_SUCCESS
  return rule_verdict(rule, counts.np, counts.d, counts.u, counts.nf, counts.nk), rule
end

local function store_parent_counts(c, counts)
  redis.call('HSET', TASKS, TF_DEPS_LEFT .. c, counts.d, TF_PARENTS_LEFT .. c, counts.u,
    TF_PARENTS_FAILED .. c, counts.nf, TF_PARENTS_SKIPPED .. c, counts.nk)
end

-- What the script revives (true by index) and how each ended (its state before the call);
-- the resets read, with their verdicts and parent counts. (One table: the main chunk may
-- hold at most 200 locals.)
local RESET = {revived = {}, ended = {}, list = {}, verdicts = {}, counts = {}}
-- what an ended task may be, to be reset (cancelled: only in a cancelled job, never reset)
RESET.RESETTABLE = {[T_SUCCEEDED] = true, [T_FAILED] = true, [T_UPSTREAM_FAILED] = true,
  [T_SKIPPED] = true}

-- Why the loaded job's tasks cannot be reset now, or nil: it must not be cancelled nor
-- packed, and no cascade may be under way (BUSY: finish it first).
function RESET.refusal()
  if redis.call('HGET', JOB, JOB_FIELD.STOP) == 'cancel' then
    return {WRONG_STATE, 'the job was cancelled'}
  end
  if redis.call('EXISTS', FRONTIER) == 1 then return {BUSY} end
  if redis.call('HEXISTS', JOB, JOB_FIELD.PACKED) == 1 then
    return {WRONG_STATE, 'the job is packed: restore it first (restore.lua)'}
  end
end

function RESET.not_in(i, want)
  return {WRONG_STATE, 'task ' .. (redis.call('HGET', TASKS, TF_ID .. i) or i) .. ' is not '
    .. want}
end

-- Read the tasks to reset from ARGV[k..]: each must have ended and still hold its arguments.
-- A task whose trigger rule still fails or skips on its parents (counted with the tasks
-- revived so far as not ended) is left as it is, or refused when it is in `strict` (a task
-- the caller named). Returns a refusal, or nil with RESET.list filled.
function RESET.read(k, strict)
  while k <= #ARGV do
    local i, nparents = ARGV[k], tonumber(ARGV[k + 1])
    local state = task_state(i)
    if not RESET.RESETTABLE[state] then return RESET.not_in(i, 'ended') end
    if redis.call('HEXISTS', TASKS, TF_PAYLOAD .. i) == 0 then -- never, but by hand
      return {WRONG_STATE, 'task ' .. task_name(i) .. ' cannot run again: its arguments '
        .. 'are gone'}
    end
    local parents = count_parents(k + 2, k + 1 + nparents, RESET.revived)
    local verdict, rule = parents_verdict(i, parents)
    if strict[i] and (verdict == 'fail' or verdict == 'skip') then
      return {WRONG_STATE, 'task ' .. task_name(i) .. ' cannot run again: its trigger rule '
        .. rule .. (verdict == 'fail' and ' fails' or ' skips') .. ' on its parents as they '
        .. 'ended (clear them too: --upstream)'}
    end
    if verdict ~= 'fail' and verdict ~= 'skip' then
      RESET.list[#RESET.list + 1] = i
      RESET.revived[i] = true
      RESET.verdicts[i], RESET.counts[i], RESET.ended[i] = verdict, parents, state
    end
    k = k + 2 + nparents
  end
  return nil
end

-- Task i is alive again: a waiting child that counted how it ended (its dependencies left
-- when it succeeded; with a trigger rule or a parent skipped, its parents ended, failed and
-- skipped) counts it as not ended. A child revived by this call is counted afresh
-- (RESET.apply); the counters of a child that is not waiting are read by no one: a task
-- only waits again through a reset, which counts them afresh.
function RESET.uncount(list)
  for _, i in ipairs(list) do
    local csv = redis.call('HGET', TASKS, TF_CHILDREN .. i) or ''
    for c in string.gmatch(csv, '[^,]+') do
      if not RESET.revived[c] and task_state(c) == T_WAITING then
        local counted = redis.call('HEXISTS', TASKS, TF_PARENTS_LEFT .. c) == 1
        if RESET.ended[i] == T_SUCCEEDED then
          redis.call('HINCRBY', TASKS, TF_DEPS_LEFT .. c, 1)
        end
        if counted then
          redis.call('HINCRBY', TASKS, TF_PARENTS_LEFT .. c, 1)
          if RESET.ended[i] == T_SKIPPED then
            redis.call('HINCRBY', TASKS, TF_PARENTS_SKIPPED .. c, -1)
          elseif RESET.ended[i] ~= T_SUCCEEDED then
            redis.call('HINCRBY', TASKS, TF_PARENTS_FAILED .. c, -1)
          end
        end
      end
    end
  end
end

-- A task that ran gets a fresh budget of attempts.
function RESET.fresh_budget(i)
  local used = tonumber(redis.call('HGET', TASKS, TF_ATTEMPTS .. i) or 0)
  if used > 0 then redis.call('HSET', TASKS, TF_MAX_ATTEMPTS .. i, used + max_attempts(i)) end
end

-- Put RESET.list back: queued when its rule is met already, else waiting, its result and
-- error gone, its parents counted afresh. Returns how many of them the job's counters
-- counted as failed and as skipped.
function RESET.apply(now, kind)
  local failed, skipped = 0, 0
  for _, i in ipairs(RESET.list) do
    local ended = RESET.ended[i]
    OBS.emit(kind, i)
    if ended == T_SKIPPED then skipped = skipped + 1 end
    if ended == T_FAILED or ended == T_UPSTREAM_FAILED then failed = failed + 1 end
    if ended == T_FAILED then redis.call('ZREM', DLQ, lease_member(i)) end
    if ended ~= T_UPSTREAM_FAILED then RESET.fresh_budget(i) end
    redis.call('HDEL', TASKS, TF_FINISHED_AT .. i, TF_ERROR .. i, TF_RESULT .. i)
    store_parent_counts(i, RESET.counts[i])
    if RESET.verdicts[i] == 'run' then
      enqueue(i, now) -- its rule is met: nothing else would release it
    else
      redis.call('HSET', TASKS, TF_STATE .. i, T_WAITING, TF_UPDATED_AT .. i, now)
    end
  end
  return failed, skipped
end

-- The job has n tasks more to end, of which its counters counted `failed` as failed and
-- `skipped` as skipped: a finished job re-opens (running, no TTL, out of the expiring
-- index, its compaction called off) and is finalized again when its tasks end.
function RESET.reopen_job(packed, n, failed, skipped, now)
  META.left = redis.call('HINCRBY', JOB, JOB_FIELD.LEFT, n)
  -- (never -0: Lua writes it '-0', which HINCRBY refuses)
  if failed > 0 then redis.call('HINCRBY', JOB, JOB_FIELD.FAILED, -failed) end
  if skipped > 0 then redis.call('HINCRBY', JOB, JOB_FIELD.SKIPPED, -skipped) end
  local expiring = expiring_member()
  set_job_state(J_RUNNING)
  redis.call('HSET', JOB, JOB_FIELD.UPDATED_AT, now)
  redis.call('HDEL', JOB, JOB_FIELD.FINISHED_AT, JOB_FIELD.STOP)
  redis.call('ZREM', LEADER, 'finalize|' .. JOB_ID)
  redis.call('ZREM', LEADER, 'compact|' .. JOB_ID) -- a compaction under way starts over
  redis.call('DEL', packed)
  redis.call('HDEL', JOB, JOB_FIELD.COMPACT_CURSOR)
  for _, key in ipairs({JOB, TASKS, HISTORY, FRONTIER}) do redis.call('PERSIST', key) end
  if IDEM ~= JOB then redis.call('PERSIST', IDEM) end
  redis.call('ZADD', ACTIVE, redis.call('HGET', JOB, JOB_FIELD.CREATED_AT), JOB_ID)
  redis.call('ZREM', EXPIRING, expiring)
  if SLOT.archive then redis.call('ZREM', SLOT.archive, JOB_ID) end -- archived when it ends again
end

-- A history line for what a person did to task i (clear, mark): `who` in the handler's
-- column, what and why in the error's.
function RESET.record_by_hand(i, state, now, who, what, reason)
  local attempt = redis.call('HGET', TASKS, TF_ATTEMPTS .. i) or '0'
  local text = what .. ' by ' .. who .. (reason ~= '' and (': ' .. reason) or '')
  append_history({table.concat({i, attempt, state, who, '', now, text}, '\t')})
end
