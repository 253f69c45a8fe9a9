--[[ submit: store a validated job. A small job is split here at once (its tasks written,
  its ready tasks queued: it starts running with no leader round trip); a larger one is
  handed to a leader, which splits it in bounded chunks.
  KEYS: the job context (_job.lua), then KEYS[XK] shard sequence counter  KEYS[XK+1] jobs
  zset  KEYS[XK+2] owner's jobs zset (the job hash again when there is no owner)
  KEYS[XK+3] the firing schedule's jobs zset (the job hash again when no schedule fired it)
  ARGV[A] number of job-hash arguments, then those field, value pairs (with an idempotency
  key, 'spec_digest' among them: the key's value is "<job id>\t<digest>")
  then the number of tasks-hash arguments (0: a leader splits the job), then those pairs,
  then the indexes of the ready tasks
  Returns {0, job id} created | {1, job id} the idempotency key names an existing job of
          the same spec | {-7, job id} it names a job of a different spec
          | {-3} a job with this id exists already | {-5} queues not passed ]]

local njob = tonumber(ARGV[A])
local ntask_at = A + 1 + njob
local ntask = tonumber(ARGV[ntask_at])
local digest, ntasks = '', 0
-- the queues of an inline split are checked against the job's own list before any write
for k = A + 1, A + njob, 2 do
  if ARGV[k] == JF.QUEUES then META.queues = ARGV[k + 1] end
  if ARGV[k] == JF.IDEMPOTENCY_KEY and IDEM == J then return {KEYS_MISSING} end
  if ARGV[k] == JF.DIGEST then digest = ARGV[k + 1] end
  if ARGV[k] == JF.TASKS then ntasks = tonumber(ARGV[k + 1]) end
end

if IDEM ~= J then
  local existing = redis.call('GET', IDEM)
  if existing then
    -- a key stored before digests were kept ("<job id>" alone) matches any spec
    local id, stored = string.match(existing, '^([^\t]*)\t?(.*)$')
    if stored ~= '' and stored ~= digest then return {IDEMPOTENCY_CONFLICT, id} end
    return {ALREADY, id}
  end
end
if redis.call('EXISTS', J) == 1 then return {WRONG_STATE} end
if ntask > 0 and not queues_passed() then return {KEYS_MISSING} end

local now = now_ms()
local seq = redis.call('INCR', KEYS[XK])
local first_root = ntask_at + ntask + 1
-- a job split here runs at once: it enters the running index directly, never pending
local state, split = J_PENDING, {}
if ntask > 0 then
  state = J_RUNNING
  split = {JF.STARTED_AT, now, JF.WRITTEN, ntasks, JF.QUEUED, #ARGV - first_root + 1}
end
local job = {JF.ID, JOB_ID, JF.STATE, state, JF.SEQ, seq, JF.CREATED_AT, now, JF.UPDATED_AT, now,
  JF.FAILED, 0, JF.CANCELLED, 0, unpack(split)}
for k = A + 1, A + njob do job[#job + 1] = ARGV[k] end
call_chunked('HSET', J, job)
if IDEM ~= J then redis.call('SET', IDEM, JOB_ID .. '\t' .. digest) end
redis.call('ZADD', KEYS[XK + 1], now, JOB_ID)
redis.call('ZADD', ACTIVE, now, JOB_ID)
if KEYS[XK + 2] ~= J then redis.call('ZADD', KEYS[XK + 2], now, JOB_ID) end
if KEYS[XK + 3] ~= J then redis.call('ZADD', KEYS[XK + 3], now, JOB_ID) end
redis.call('ZADD', STATE_INDEX[state], now, JOB_ID)
OBS.emit(EV.SUBMITTED, false)

if ntask == 0 then
  leader_message('split', now)
  return {OK, JOB_ID}
end
call_chunked_argv('HSET', T, ntask_at + 1, ntask_at + ntask)
stamp_created(0, ntasks - 1, now)
load_job()
local roots = {}
for k = first_root, #ARGV do roots[#roots + 1] = ARGV[k] end
enqueue_waiting(roots, now)
flush_wakes()
return {OK, JOB_ID}
