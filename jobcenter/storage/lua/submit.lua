--[[ submit: store validated jobs of one shard, in order, each as its own transition (one
  call for many: the job context is paid for once). A small job is split here at once (its
  tasks written, its ready tasks queued: it starts running with no leader round trip); a
  larger one is handed to a leader, which splits it in bounded chunks.
  KEYS: the job context (_job.lua) of the first job, with the queues of every job of the
  call; then KEYS[FIRST_OWN_KEY] shard sequence counter  KEYS[FIRST_OWN_KEY+1] jobs zset; then 7 per
  job: its hash, tasks hash, history, frontier, idempotency key (its hash again when it has none),
  owner's jobs zset (its hash again when no owner), the firing schedule's jobs zset (its
  hash again when no schedule fired it)
  ARGV[FIRST_OWN_ARG] number of jobs, then per job: its id, the number of job-hash arguments, those
  field, value pairs (with an idempotency key, 'spec_digest' among them: the key's value is
  "<job id>\t<digest>"), the number of tasks-hash arguments (0: a leader splits the job),
  those pairs, the number of ready tasks, their indexes, the number of its tags (their
  zsets follow its 7 keys)
  Returns per job, in order, its code and a job id, one flat list: {0, job id} created
          | {1, id} the idempotency key names an existing job of the same spec | {-14, id} it
          names a job of a different spec | {-3, job id} a job with this id exists already
          | {-5, job id} queues or idempotency key not passed ]]

local SEQ, JOBS = KEYS[FIRST_OWN_KEY], KEYS[FIRST_OWN_KEY + 1]

-- The job bound at KEYS[k..], its arguments from ARGV[at] (its number of job-hash
-- arguments) on: checked, then stored; returns its code and id.
local function submit_job(k, at, ntags)
  local njob = tonumber(ARGV[at])
  local ntask_at = at + 1 + njob
  local ntask = tonumber(ARGV[ntask_at])
  local roots_at = ntask_at + ntask + 1
  local digest, ntasks = '', 0
  -- the queues of an inline split are checked against the job's own list before any write
  for f = at + 1, at + njob, 2 do
    if ARGV[f] == JOB_FIELD.QUEUES then META.queues = ARGV[f + 1] end
    if ARGV[f] == JOB_FIELD.IDEMPOTENCY_KEY and IDEM == JOB then return KEYS_MISSING, JOB_ID end
    if ARGV[f] == JOB_FIELD.DIGEST then digest = ARGV[f + 1] end
    if ARGV[f] == JOB_FIELD.TASKS then ntasks = tonumber(ARGV[f + 1]) end
  end

  if IDEM ~= JOB then
    local existing = redis.call('GET', IDEM)
    if existing then
      -- a key stored before digests were kept ("<job id>" alone) matches any spec
      local id, stored = string.match(existing, '^([^\t]*)\t?(.*)$')
      if stored ~= '' and stored ~= digest then return IDEMPOTENCY_CONFLICT, id end
      return ALREADY, id
    end
  end
  if redis.call('EXISTS', JOB) == 1 then return WRONG_STATE, JOB_ID end
  if ntask > 0 and not queues_passed() then return KEYS_MISSING, JOB_ID end

  local now = now_ms()
  local seq = redis.call('INCR', SEQ)
  -- a job split here runs at once: it enters the running index directly, never pending
  local state, split = J_PENDING, {}
  if ntask > 0 then
    state = J_RUNNING
    split = {JOB_FIELD.STARTED_AT, now, JOB_FIELD.WRITTEN, ntasks, JOB_FIELD.QUEUED,
      tonumber(ARGV[roots_at])}
  end
  local job = {JOB_FIELD.ID, JOB_ID, JOB_FIELD.STATE, state, JOB_FIELD.SEQ, seq,
    JOB_FIELD.CREATED_AT, now,
    JOB_FIELD.UPDATED_AT, now, JOB_FIELD.FAILED, 0, JOB_FIELD.CANCELLED, 0, unpack(split)}
  for f = at + 1, at + njob do job[#job + 1] = ARGV[f] end
  call_chunked('HSET', JOB, job)
  if IDEM ~= JOB then redis.call('SET', IDEM, JOB_ID .. '\t' .. digest) end
  redis.call('ZADD', JOBS, now, JOB_ID)
  redis.call('ZADD', ACTIVE, now, JOB_ID)
  if KEYS[k + 5] ~= JOB then redis.call('ZADD', KEYS[k + 5], now, JOB_ID) end
  if KEYS[k + 6] ~= JOB then redis.call('ZADD', KEYS[k + 6], now, JOB_ID) end
  redis.call('ZADD', STATE_INDEX[state], now, JOB_ID)
  for t = k + 7, k + 6 + ntags do redis.call('ZADD', KEYS[t], now, JOB_ID) end
  OBS.emit(EVENT_KIND.SUBMITTED, false)

  if ntask == 0 then
    leader_message('split', now)
    return OK, JOB_ID
  end
  call_chunked_argv('HSET', TASKS, ntask_at + 1, ntask_at + ntask)
  stamp_created(0, ntasks - 1, now)
  load_job()
  local roots = {}
  for f = roots_at + 1, roots_at + tonumber(ARGV[roots_at]) do roots[#roots + 1] = ARGV[f] end
  enqueue_waiting(roots, now)
  flush_wakes()
  return OK, JOB_ID
end

local replies, k, at = {}, FIRST_OWN_KEY + 2, FIRST_OWN_ARG + 1
for _ = 1, tonumber(ARGV[FIRST_OWN_ARG]) do
  bind_job(k, ARGV[at])
  local njob = tonumber(ARGV[at + 1])
  local ntask = tonumber(ARGV[at + 2 + njob])
  local nroots = tonumber(ARGV[at + 3 + njob + ntask])
  local ntags = tonumber(ARGV[at + 4 + njob + ntask + nroots])
  replies[#replies + 1], replies[#replies + 2] = submit_job(k, at + 1, ntags)
  k, at = k + 7 + ntags, at + 5 + njob + ntask + nroots
end
return replies
