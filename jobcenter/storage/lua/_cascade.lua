--[[ _cascade: what follows a change of a task, after _job.lua (its context: the job's keys,
  META, the queues): queueing ready tasks (enqueue, flush_wakes), the history, leader
  messages, the frontier that carries a task's end to its children under their trigger rules
  (drain_frontier), a task's failure (fail_task), the job's end (finalize_job, compaction). ]]

-- Run-time fan-out (_data.lua defines them): enqueue's hook for mapped tasks, and the
-- frontier's expansion step; enqueue's hook for a task with `wait_for:` (_await.lua).
local map_ready, map_expand, await_ready

local pending_wakes = {}
OBS.queued = {} -- indexes queued by this call: one event, written by flush_wakes
OBS.queued_into = {} -- queue name -> tasks this call queued into it
local function count_queued(q) -- (pending_wakes: reset by each flush)
  pending_wakes[q], OBS.queued_into[q] = (pending_wakes[q] or 0) + 1, (OBS.queued_into[q] or 0) + 1
end
local function enqueue(i, now)
  -- what it needs of the task, in one read
  local f = redis.call('HMGET', TASKS, TF_MAP_ARG .. i, TF_QUEUE .. i, TF_PRIORITY .. i,
    TF_RANK .. i, TF_LIMITS .. i, TF_AWAIT .. i)
  if f[1] and map_ready(i, now) then return end -- a mapped task is expanded or joined, never queued
  if f[6] then return await_ready(i, now, f[6]) end
  local qname = f[2] or META.queue
  redis.call('HSET', TASKS, TF_STATE .. i, T_QUEUED, TF_QUEUED_AT .. i, now,
    TF_UPDATED_AT .. i, now)
  local priority = tonumber(f[3]) or META.priority
  redis.call('ZADD', QUEUES[qname].ready, -priority, member_of(i, f[4], f[5]))
  count_queued(qname)
  OBS.queued[#OBS.queued + 1] = i
end
-- enqueue() for those of tasks `indexes` still waiting (a split's ready tasks): one read
-- per task, then one HSET for them all and one ZADD per queue.
local function enqueue_waiting(indexes, now)
  local fields, entries = {}, {}
  for _, i in ipairs(indexes) do
    local f = redis.call('HMGET', TASKS, TF_STATE .. i, TF_MAP_ARG .. i, TF_QUEUE .. i,
      TF_PRIORITY .. i, TF_RANK .. i, TF_LIMITS .. i, TF_AWAIT .. i)
    if f[1] == T_WAITING and (f[2] or f[7]) then
      enqueue(i, now) -- a mapped task (expanded or joined) or a wait: never queued
    elseif f[1] == T_WAITING then
      local qname = f[3] or META.queue
      local n = #fields
      fields[n + 1], fields[n + 2] = TF_STATE .. i, T_QUEUED
      fields[n + 3], fields[n + 4] = TF_QUEUED_AT .. i, now
      fields[n + 5], fields[n + 6] = TF_UPDATED_AT .. i, now
      local queued = entries[qname] or {}
      entries[qname] = queued
      queued[#queued + 1] = -(tonumber(f[4]) or META.priority)
      queued[#queued + 1] = member_of(i, f[5], f[6])
      count_queued(qname)
      OBS.queued[#OBS.queued + 1] = i
    end
  end
  call_chunked('HSET', TASKS, fields)
  for qname, queued in pairs(entries) do call_chunked('ZADD', QUEUES[qname].ready, queued) end
end
-- After enqueue(): wake idle workers, say which tasks were queued, write the counts.
local function flush_wakes()
  for qname, n in pairs(pending_wakes) do wake(QUEUES[qname].wake, n) end
  pending_wakes = {}
  OBS.emit_many(EVENT_KIND.QUEUED, OBS.queued)
  OBS.queued = {}
  OBS.flush_counts()
end

-- A message for whichever worker plays leader next: split, continue, finalize, cancel.
local function leader_message(kind, due)
  redis.call('ZADD', LEADER, due, kind .. '|' .. JOB_ID)
  wake(LEADER_WAKE, 1)
end

-- History entries: "index, attempt, state, handler, started, finished, error" tab-separated.
local function append_history(entries)
  if #entries == 0 then return end
  local length = 0
  for first = 1, #entries, ARGS_PER_CALL_MAX do
    length = redis.call('RPUSH', HISTORY, unpack(entries, first,
      math.min(#entries, first + ARGS_PER_CALL_MAX - 1)))
  end
  if length > HISTORY_MAX then redis.call('LTRIM', HISTORY, -HISTORY_MAX, -1) end
end

local function record_history(i, state, now, err)
  local a = redis.call('HMGET', TASKS, TF_ATTEMPTS .. i, TF_HANDLER .. i, TF_STARTED_AT .. i)
  local line = {i, a[1] or '0', state, a[2] or '', a[3] or '', now, err or ''}
  append_history({table.concat(line, '\t')})
end

-- A finished job whose releases and cascades are all done never changes again (until a
-- retry): hand it to a leader, who packs its tasks and history into one record (packed.py)
-- and swaps it in with compact.lua, off Redis's one thread. Called at the end of every script
-- that may finalize a job.
-- (Lua allows 200 locals per script and the preludes use most: no table for the states.)
local function compact_when_settled(now)
  local state = META.state
  if (state ~= J_SUCCEEDED and state ~= J_FAILED and state ~= J_CANCELLED) or META.packed
      or redis.call('EXISTS', FRONTIER) == 1 then
    return
  end
  -- posted once: a late report on the finished job stays a no-op
  if redis.call('ZSCORE', LEADER, 'compact|' .. JOB_ID) then return end
  leader_message('compact', now)
end

-- Close a job whose tasks all ended: succeeded only if every task succeeded; cancelled if a
-- user cancelled it; else failed (or failed whatever its tasks did: `failed`, for a job
-- whose tasks Redis lost). Its keys then live for the retention period (with an archive, the
-- hot retention once the archive has it).
local function finalize_job(now, failed)
  local j = redis.call('HMGET', JOB, JOB_FIELD.FAILED, JOB_FIELD.STOP, JOB_FIELD.RETENTION,
    JOB_FIELD.AWAITED)
  local state = J_SUCCEEDED
  if j[2] == 'cancel' then
    state = J_CANCELLED
  elseif failed or tonumber(j[1] or 0) > 0 then
    state = J_FAILED
  end
  set_job_state(state)
  SLOT.forget_paused_job(SLOT.keys.limits, JOB, JOB_ID) -- a paused job cancelled, say
  OBS.emit(EVENT_KIND.FINALIZED, false, {EVENT_FIELD.DETAIL, state})
  OBS.count(METRIC_FIELD.JOBS .. '\t' .. state)
  redis.call('HSET', JOB, JOB_FIELD.FINISHED_AT, now, JOB_FIELD.UPDATED_AT, now)
  redis.call('ZREM', ACTIVE, JOB_ID)
  redis.call('ZREM', LEADER, 'finalize|' .. JOB_ID)
  if SLOT.archive then -- kept whole until the archive has it (archived.lua sets the TTLs)
    redis.call('ZADD', SLOT.archive, now, JOB_ID)
  else
    local retention = tonumber(j[3] or DEFAULT_RETENTION_MS)
    for _, key in ipairs({JOB, TASKS, HISTORY, FRONTIER}) do redis.call('PEXPIRE', key, retention) end
    if IDEM ~= JOB then redis.call('PEXPIRE', IDEM, retention) end
    redis.call('ZADD', EXPIRING, now + retention, expiring_member())
  end
  queue_notice(state, '', now) -- in the finalizing script: no finished job misses it
  if j[4] then leader_message('waiters', now) end -- tasks of other jobs wait for this end
  return state
end

-- Whether Redis lost the job's tasks hash (evicted under a maxmemory-policy other than
-- noeviction, or deleted by hand): its tasks were written (it runs, or a split wrote some),
-- no packed record took their place, and task 0, the first one written, is not there. (Its
-- first field, not the key: a leader's next split chunk would create the hash again.)
local function tasks_lost()
  if META.packed or META.state == J_SUCCEEDED or META.state == J_FAILED
      or META.state == J_CANCELLED then
    return false
  end
  if META.state ~= J_RUNNING and tonumber(redis.call('HGET', JOB, JOB_FIELD.WRITTEN) or 0) == 0 then
    return false
  end
  return redis.call('HEXISTS', TASKS, TF_STATE .. 0) == 0
end

-- End a job whose tasks Redis lost (tasks_lost): none can run or be counted any more, so it
-- ends now, failed (cancelled under a user's cancel), its error naming the lost key. What is
-- left of its tasks and frontier goes, and its split, continue and cancel messages; a queue
-- entry or lease of its tasks is dropped by the script that meets it (start, expire).
-- Returns the job's final state.
local function settle_lost(now)
  local err = 'lost: Redis no longer holds the tasks hash ' .. TASKS
    .. ' (evicted? jobcenter needs maxmemory-policy noeviction)'
  OBS.emit(EVENT_KIND.REPAIRED, false, {EVENT_FIELD.DETAIL, 'lost', EVENT_FIELD.ERROR,
    string.sub(err, 1, OBS.error_max)})
  OBS.count(METRIC_FIELD.REPAIRS .. '\tlost')
  redis.call('ZREM', LEADER, 'split|' .. JOB_ID, 'continue|' .. JOB_ID, 'cancel|' .. JOB_ID)
  redis.call('DEL', TASKS, FRONTIER)
  local left = tonumber(redis.call('HGET', JOB, JOB_FIELD.LEFT) or 0)
  redis.call('HINCRBY', JOB, JOB_FIELD.FAILED, left)
  redis.call('HSET', JOB, JOB_FIELD.ERROR, err, JOB_FIELD.LEFT, 0)
  META.left = 0
  local state = finalize_job(now, true)
  OBS.flush_counts()
  return state
end

-- One more task (or `count` more) is terminal; the last one finalizes the job.
-- (META.left: as load_job read it, kept current by each change of it; one write, not two)
local function task_finished(now, count)
  META.left = (META.left or tonumber(redis.call('HGET', JOB, JOB_FIELD.LEFT) or 0)) - (count or 1)
  META.updated_at = now
  redis.call('HSET', JOB, JOB_FIELD.UPDATED_AT, now, JOB_FIELD.LEFT, META.left)
  if META.left == 0 then finalize_job(now) end
end

-- Schedule a visit of i's children, telling each how i ended: 'r' succeeded, 'f' failed or
-- upstream_failed, 'k' skipped (parent_ended). ('x' entries expand a mapped task: _data.lua.)
local function push_frontier(kind, i, origin)
  if redis.call('HEXISTS', TASKS, TF_CHILDREN .. i) == 1 then
    redis.call('RPUSH', FRONTIER, kind .. '|' .. i .. '|' .. origin .. '|1')
  end
end

-- Trigger rules (jobcenter/model/trigger_rules.py; ARCHITECTURE.md, "Trigger rules").
-- A parent's end reaches each child as 'r' (succeeded), 'f' (failed or upstream_failed) or
-- 'k' (skipped). The child counts it and, once its rule is decided, runs (queued), or ends
-- skipped or upstream_failed and passes that on to its own children the same way.

-- What the rule makes of the parents so far: 'run', 'skip', 'fail' (upstream_failed) or nil
-- (not decided yet). np parents, d not succeeded, u not ended, nf failed, nk skipped. A rule
-- that can no longer be met fails at once when a parent failed; without one it waits for
-- every parent to end, so the state a task ends in never depends on the order they end in.
local function rule_verdict(rule, np, d, u, nf, nk)
  local s = np - d -- parents succeeded
  local met, hopeless
  if rule == R_ALL_DONE then
    met = u == 0
  elseif rule == R_ALL_FAILED then
    met, hopeless = u == 0 and nf == np, s > 0 or nk > 0
  elseif rule == R_ONE_SUCCESS then
    met, hopeless = s > 0, u == 0
  elseif rule == R_ONE_FAILED then
    met, hopeless = nf > 0, u == 0
  elseif rule == R_NONE_FAILED then
    met, hopeless = u == 0 and nf == 0, nf > 0
  else -- all_success
    met, hopeless = d == 0, nf + nk > 0
  end
  if met then return 'run' end
  if hopeless and nf > 0 then return 'fail' end
  if hopeless and u == 0 then return 'skip' end
  return nil
end

-- Waiting task c will not run: it ends `state` (upstream_failed or skipped) and its
-- children hear of it through the frontier.
local function end_unrun(c, state, origin, now, err)
  redis.call('HSET', TASKS, TF_STATE .. c, state, TF_FINISHED_AT .. c, now, TF_UPDATED_AT .. c, now,
    TF_ERROR .. c, err)
  OBS.emit(state == T_SKIPPED and EVENT_KIND.SKIPPED or EVENT_KIND.UPSTREAM_FAILED, c,
    {EVENT_FIELD.ERROR, err})
  OBS.count_finished(c, state)
  if state == T_SKIPPED then
    redis.call('HINCRBY', JOB, JOB_FIELD.SKIPPED, 1)
    push_frontier('k', c, origin)
  else
    redis.call('HINCRBY', JOB, JOB_FIELD.FAILED, 1)
    push_frontier('f', c, origin)
  end
  task_finished(now)
end

local function release(c, now, take)
  if not (take and take(c, now)) then enqueue(c, now) end
end
local function task_name(i) return redis.call('HGET', TASKS, TF_ID .. i) or i end

-- Act on a waiting task's verdict: queue it (or let `take` run it), or end it unrun. kind:
-- how the parent whose end decided it ended (nil: a repair).
local function act_on_verdict(c, rule, verdict, kind, origin, now, take)
  if verdict == 'run' then
    release(c, now, take)
  elseif verdict == 'fail' and kind == 'f' then -- passed on: named after the task that failed
    end_unrun(c, T_UPSTREAM_FAILED, origin, now, 'upstream task ' .. task_name(origin) .. ' failed')
  elseif verdict == 'fail' then
    end_unrun(c, T_UPSTREAM_FAILED, c, now,
      'trigger rule ' .. rule .. ' cannot be met: a parent failed')
  elseif verdict == 'skip' and kind == 'k' and rule == R_ALL_SUCCESS then
    end_unrun(c, T_SKIPPED, origin, now, 'upstream task ' .. task_name(origin) .. ' skipped')
  elseif verdict == 'skip' then
    end_unrun(c, T_SKIPPED, c, now, 'trigger rule ' .. rule .. ' not met')
  end
end

-- A parent of task c ended (kind 'r', 'f' or 'k'; origin: the task whose failure or skip
-- this passes on). Every task counts its parents not succeeded (d). In a job without a
-- trigger rule nothing else is counted or read: its releases cost what they did before
-- rules existed. Otherwise the other counters are kept once a parent ended other than by
-- succeeding, or from the start for a task with a rule.
local function parent_ended(kind, c, origin, now, take)
  local d = nil
  if kind == 'r' then d = redis.call('HINCRBY', TASKS, TF_DEPS_LEFT .. c, -1) end
  if not META.rules then -- every task all_success, so no task is ever skipped
    if (kind == 'f' or d == 0) and task_state(c) == T_WAITING then
      if kind == 'r' then return release(c, now, take) end
      end_unrun(c, T_UPSTREAM_FAILED, origin, now,
        'upstream task ' .. task_name(origin) .. ' failed')
    end
    return
  end
  local f = redis.call('HMGET', TASKS, TF_STATE .. c, TF_TRIGGER_RULE .. c, TF_PARENTS_LEFT .. c)
  local state, rule, u = f[1], f[2], f[3]
  if not rule and not u then -- all_success, every parent so far succeeded
    if state ~= T_WAITING then return end
    if kind == 'r' then
      if d == 0 then release(c, now, take) end
      return
    elseif kind == 'f' then
      return end_unrun(c, T_UPSTREAM_FAILED, origin, now,
        'upstream task ' .. task_name(origin) .. ' failed')
    end
  end
  d = d or tonumber(redis.call('HGET', TASKS, TF_DEPS_LEFT .. c) or 0)
  if u then
    u = redis.call('HINCRBY', TASKS, TF_PARENTS_LEFT .. c, -1)
  elseif kind == 'r' then
    u = d -- absent: no parent ended other than by succeeding
  else
    u = d - 1
    redis.call('HSET', TASKS, TF_PARENTS_LEFT .. c, u)
  end
  if kind == 'f' then redis.call('HINCRBY', TASKS, TF_PARENTS_FAILED .. c, 1) end
  if kind == 'k' then redis.call('HINCRBY', TASKS, TF_PARENTS_SKIPPED .. c, 1) end
  if state ~= T_WAITING then return end
  local n = redis.call('HMGET', TASKS, TF_PARENTS .. c, TF_PARENTS_FAILED .. c,
    TF_PARENTS_SKIPPED .. c)
  rule = rule or R_ALL_SUCCESS
  local verdict = rule_verdict(rule, tonumber(n[1] or 0), d, u, tonumber(n[2] or 0),
    tonumber(n[3] or 0))
  act_on_verdict(c, rule, verdict, kind, origin, now, take)
end

-- Tell at most `budget` of task i's children (csv, from position pos) how i ended (kind and
-- origin, as its frontier entry): the budget left, and where the rest start (nil: none left).
local function visit_children(kind, i, origin, csv, pos, budget, now, take)
  while budget > 0 do
    local s, e = string.find(csv, '[^,]+', pos)
    if not s then break end
    local c = string.sub(csv, s, e)
    pos = e + 2
    budget = budget - 1
    parent_ended(kind, c, origin, now, take)
  end
  if string.find(csv, '[^,]+', pos) then return budget, pos end
  return budget, nil
end

-- Visit children from the frontier, at most `budget` of them (default FRONTIER_BUDGET); what
-- is left waits for a 'continue' leader message, so a 100,000-child fan-out never blocks
-- Redis for long. `fresh`: entries this call made ({kind, task, origin, children csv} each),
-- visited first, not through the list (three commands fewer); what is left of them joins it.
local function drain_frontier(now, take, budget, fresh)
  local emptied = false
  budget = budget or FRONTIER_BUDGET
  local left, pos = {}, nil
  for _, e in ipairs(fresh or {}) do
    budget, pos = visit_children(e[1], e[2], e[3], e[4], 1, budget, now, take)
    if pos then left[#left + 1] = e[1] .. '|' .. e[2] .. '|' .. e[3] .. '|' .. pos end
  end
  call_chunked('RPUSH', FRONTIER, left)
  while budget > 0 do
    local entry = redis.call('LPOP', FRONTIER)
    emptied = not entry
    if emptied then break end
    local kind, i, origin, pos = string.match(entry, '^(%a)|(%d+)|(%d+)|(%d+)$')
    if kind == 'x' then budget = map_expand(i, budget, now) end -- writes instances instead
    local csv = kind ~= 'x' and redis.call('HGET', TASKS, TF_CHILDREN .. i) or ''
    budget, pos = visit_children(kind, i, origin, csv, tonumber(pos), budget, now, take)
    if pos then redis.call('LPUSH', FRONTIER, kind .. '|' .. i .. '|' .. origin .. '|' .. pos) end
  end
  flush_wakes()
  if not emptied and redis.call('EXISTS', FRONTIER) == 1 then
    -- Releases go on after a job is finalized too (they keep every dependency counter
    -- equal to the parents not yet succeeded, which a later retry relies on); a list
    -- re-created by the push-back above must expire with the job.
    local ttl = redis.call('PTTL', JOB)
    if ttl > 0 then redis.call('PEXPIRE', FRONTIER, ttl) end
    leader_message('continue', now)
  end
  compact_when_settled(now)
end

-- Terminal failure of task i: record it (and dead-letter it), then cascade to every
-- descendant.
local function fail_task(i, now, err)
  OBS.emit(EVENT_KIND.FAILED, i, OBS.attempt_of(i, err))
  OBS.count_finished(i, T_FAILED)
  redis.call('HSET', TASKS, TF_STATE .. i, T_FAILED, TF_FINISHED_AT .. i, now, TF_UPDATED_AT .. i,
    now, TF_ERROR .. i, err)
  redis.call('HDEL', TASKS, TF_WAITING_FOR .. i) -- no longer waiting for a worker (give_back.lua)
  redis.call('ZREM', LEASES, lease_member(i))
  SLOT.free_slots(i)
  redis.call('ZADD', DLQ, now, lease_member(i))
  redis.call('HINCRBY', JOB, JOB_FIELD.FAILED, 1)
  queue_notice(NOTICE.TASK_FAILED, ':' .. NOTICE.TASK_FAILED .. ':' .. i, now, true)
  record_history(i, T_FAILED, now, err)
  push_frontier('f', i, i)
  task_finished(now)
end
