--[[ _await: tasks that wait for the world (spec `wait_for:`), prepended to every job-scoped
  script after _data.lua. Such a task runs no function: once its dependencies are met it is
  `awaiting` (enqueue's hook, await_ready), in no queue, with no lease, slot or thread, until
  what it waits for releases it (await_release: a signal's payload becomes its result, and
  its children are released as a completion releases them) or its timeout fails it
  (await_expire, by an 'await' leader message due at the earliest timeout). Its `aw:` field
  says what it waits for: "<kind>|<timeout ms or 0>|<name>", kind s for a signal, j for a job
  (by id), c for the run of a schedule of the same fire time, k for a child job it spawned
  (spawned.lua); a job or schedule wait also
  asks the leader at once (the 'await' message) to register it with the job it waits for
  (runtime/waits.py), whose end then settles it (await_settle.lua).
  KEYS: the job context (_job.lua), as every job script. Returns: see each function. ]]

-- Kind, timeout ms (0: none) and name of what a task waits for (its `aw:` field).
local function await_of(spec)
  local kind, timeout, name = string.match(spec, '^(%a)|(%d+)|(.*)$')
  return kind, tonumber(timeout), name
end

-- What a wait waits for, in words.
local function await_what(kind, name)
  if kind == 'j' then return 'job ' .. name end
  if kind == 'c' then return 'the run of schedule ' .. name end
  if kind == 'k' then return 'child job ' .. name end
  return 'signal ' .. name
end

-- Awaiting task i ends succeeded with `result` (msgpack), as a completion ends a task.
local function await_release(i, now, result)
  redis.call('HSETNX', TASKS, TF_STARTED_AT .. i, redis.call('HGET', TASKS, TF_QUEUED_AT .. i) or now)
  redis.call('HSET', TASKS, TF_STATE .. i, T_SUCCEEDED, TF_FINISHED_AT .. i, now,
    TF_UPDATED_AT .. i, now)
  if result ~= '' then redis.call('HSET', TASKS, TF_RESULT .. i, result) end
  redis.call('HDEL', TASKS, TF_SIGNAL .. i)
  OBS.emit(EVENT_KIND.SUCCEEDED, i, {})
  OBS.count_finished(i, T_SUCCEEDED)
  record_history(i, T_SUCCEEDED, now, nil)
  push_frontier('r', i, i)
  task_finished(now)
end

-- The job's 'await' leader message is due by `due` (ms): the earliest timeout of its waits.
local function await_due_by(due)
  local member = 'await|' .. JOB_ID
  local current = redis.call('ZSCORE', LEADER, member)
  if not current or tonumber(current) > due then redis.call('ZADD', LEADER, due, member) end
end

-- enqueue's hook (declared in _cascade.lua): task i, its dependencies met, waits for what
-- `spec` names instead of entering a queue; a signal sent before it got here (its `sg:`
-- field) releases it at once.
await_ready = function(i, now, spec)
  local early = redis.call('HGET', TASKS, TF_SIGNAL .. i)
  redis.call('HSET', TASKS, TF_STATE .. i, T_AWAITING, TF_QUEUED_AT .. i, now,
    TF_UPDATED_AT .. i, now)
  if early then return await_release(i, now, early) end
  local kind, timeout, name = await_of(spec)
  OBS.emit(EVENT_KIND.AWAITING, i, {EVENT_FIELD.DETAIL, await_what(kind, name)})
  if kind ~= 's' then
    await_due_by(now) -- the leader registers it with the job it waits for
    wake(LEADER_WAKE, 1)
  elseif timeout > 0 then
    await_due_by(now + timeout)
  end
end

-- The awaiting tasks among `indexes` whose timeout passed fail, with an error saying what
-- they waited for; returns when the next one's is due (false: none).
local function await_expire(indexes, now)
  local next_due = false
  for i in string.gmatch(indexes, '%d+') do
    local f = redis.call('HMGET', TASKS, TF_STATE .. i, TF_AWAIT .. i, TF_QUEUED_AT .. i)
    local kind, timeout, name = await_of(f[2] or '')
    if f[1] == T_AWAITING and timeout and timeout > 0 then
      local due = tonumber(f[3] or now) + timeout
      if due <= now then
        fail_task(i, now, 'timed out after waiting ' .. math.floor(timeout / 1000)
          .. ' s for ' .. await_what(kind, name) .. ' (its wait_for timeout)')
      elseif not next_due or due < next_due then
        next_due = due
      end
    end
  end
  return next_due
end
