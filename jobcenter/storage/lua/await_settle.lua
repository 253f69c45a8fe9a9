--[[ await_settle: the leader settles a job's waits for other jobs (runtime/waits.py).
  KEYS: the job context (_job.lua)
  ARGV[FIRST_OWN_ARG] mode, then:
    'bind': pairs of task index, job id: the run a schedule wait waits for was found (`aj:`)
    'end': the awaited job's id, its final state ('' when it is gone), the result for a
      success (msgpack): each task awaiting that job succeeds with the result, ends
      upstream_failed when the job failed or was cancelled, or fails when it is gone
    'fail': pairs of task index, error: the wait can never be met (no such schedule, ...)
  Only awaiting tasks change: a repeated or late call (a cancelled task) is a no-op.
  Returns {0, tasks ended} | {-4} job gone | {-5} queues not passed
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it ]]

local mode = ARGV[FIRST_OWN_ARG]
if not load_job() then return {META.refusal} end
if not queues_passed() then return {KEYS_MISSING} end

-- A spawning task whose child job failed: run again while it has attempts left (it spawns a
-- new child), else fail for good; no longer a wait either way.
local function child_failed(i, now, err)
  redis.call('HDEL', TASKS, TF_AWAIT .. i, TF_AWAIT_JOB .. i)
  local attempt = tonumber(redis.call('HGET', TASKS, TF_ATTEMPTS .. i) or 0)
  if attempt < max_attempts(i) then
    record_history(i, T_FAILED, now, err)
    redis.call('HSET', TASKS, TF_ERROR .. i, err)
    enqueue(i, now)
  else
    fail_task(i, now, err)
  end
end

local now, ended = now_ms(), 0
if mode == 'bind' or mode == 'fail' then
  for k = FIRST_OWN_ARG + 1, #ARGV, 2 do
    local i = ARGV[k]
    if task_state(i) == T_AWAITING and mode == 'bind' then
      redis.call('HSET', TASKS, TF_AWAIT_JOB .. i, ARGV[k + 1])
    elseif task_state(i) == T_AWAITING then
      fail_task(i, now, ARGV[k + 1])
      ended = ended + 1
    end
  end
else
  local target, state = ARGV[FIRST_OWN_ARG + 1], ARGV[FIRST_OWN_ARG + 2]
  for i in string.gmatch(redis.call('HGET', JOB, JOB_FIELD.AWAITS) or '', '%d+') do
    local f = redis.call('HMGET', TASKS, TF_STATE .. i, TF_AWAIT .. i, TF_AWAIT_JOB .. i)
    local kind, _, name = await_of(f[2] or '')
    if f[1] == T_AWAITING and (((kind == 'j' or kind == 'k') and name == target)
        or (kind == 'c' and f[3] == target)) then
      ended = ended + 1
      if state == J_SUCCEEDED then
        await_release(i, now, ARGV[FIRST_OWN_ARG + 3])
      elseif kind == 'k' then -- its child failed: the task failed, and may run again
        child_failed(i, now, 'child job ' .. target .. (state == '' and ' is gone' or ' ended '
          .. state))
      elseif state == '' then
        fail_task(i, now, 'job ' .. target .. ' it waited for is gone (deleted, or expired after'
          .. ' its retention)')
      else
        end_unrun(i, T_UPSTREAM_FAILED, i, now, 'job ' .. target .. ' it waited for ended ' .. state)
      end
    end
  end
end
if ended > 0 then redis.call('HSET', JOB, JOB_FIELD.UPDATED_AT, now) end
drain_frontier(now, nil)
return {OK, ended}
