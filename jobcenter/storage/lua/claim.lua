--[[ claim: take due leader messages, report expired leases, move due retries, reserve tasks.
  KEYS[1] leader zset  KEYS[2] leases zset  KEYS[3] claims hash
  KEYS[4] limits hash  KEYS[5] slots hash  KEYS[6] parked zset  KEYS[7] freed set
  KEYS[8] freed wake list (unused here: the shard's limit keys come as one group)
  KEYS[9..] three per queue, in the worker's order: ready zset, delayed zset, wake list
  ARGV[1] handler id  ARGV[2] max leader messages  ARGV[3] max tasks  ARGV[4] lease ms
  ARGV[5] leader step timeout ms  ARGV[6] max expired leases to report
  ARGV[7] this shard  ARGV[8] the shard count  ARGV[9..] the queue names, in KEYS order
  Returns {leader messages "<kind>|<job>", expired lease members "<job>|<index>",
           reserved queue members "<seq>|<job>|<index>[|<limits>]", ms until the next retry
           is due or a rate window ends with tasks waiting in these queues (-1: none),
           "<protocol>|<queue>" for each queue where entries of a newer protocol were left}
  An entry of a protocol above PROTOCOL (schema.py: it ends with "|v<N>") was written by a
  newer release: it is never popped, only read, and left in its place for a worker of that
  release; the claim takes the entries behind it (at most NEWER_SKIPPED_MAX a queue per call).
  A reserved task holds a lease and a claims entry; start.lua makes it running. A worker
  that dies in between leaves an expiring lease, so expire.lua puts the task back.
  A queue with a rate limit (LIMIT_FIELD.RATE: N starts per period, N split over the shards) gives
  at most what is left of N in its current window, a window starting at the first claim
  after the last one ended; the reply's wait then covers the window's end. A pool with a
  rate limit (LIMIT_FIELD.RATE of "p:<pool>") holds its tasks the same way, parked as for a full
  pool; the pool stays in the freed set until its window ends.
  A paused queue (LIMIT_FIELD.PAUSED_QUEUE) gives nothing. A task of a paused job
  (LIMIT_FIELD.PAUSED_JOB) is parked under LIMIT_KIND.PAUSED .. job until resume_job.lua
  puts it back; only while the shard has paused jobs does a claim look.
  A task with limits (_slots.lua) is reserved only if each has room for its slots and no
  task ahead of it in its queue waits for one of them; it takes the slots with the
  reservation. Otherwise it is parked: out of the queue, so later claims do not meet it
  again, until a slot of that limit is given back (the freed set); the claim after that
  puts it back in its queue with its own score and member, so it keeps its place. ]]

local LEADER, LEASES, CLAIMS = KEYS[1], KEYS[2], KEYS[3]
local LIMITS, SLOTS, PARKED, FREED = KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local handler = ARGV[1]
local max_leader, want = tonumber(ARGV[2]), tonumber(ARGV[3])
local lease_ms, leader_timeout_ms = tonumber(ARGV[4]), tonumber(ARGV[5])
local shard, shards = tonumber(ARGV[7]), tonumber(ARGV[8])
local RETRIES_MOVED_MAX = 200 -- due retries moved per queue per call: bounded work
local PARKED_MAX = 1000 -- tasks parked per call: bounded work when a full limit heads a queue
local UNPARKED_MAX = 256 -- parked tasks put back per limit and queue per call
local ORDER_OFFSET = SLOT.ORDER_OFFSET -- spec.MAX_PRIORITY: a score -p is 0..2e9 once offset
-- newer-protocol entries passed over per queue per call: bounded reads when a newer release's
-- work heads a queue (its own workers take it; this one goes on behind it)
local NEWER_SKIPPED_MAX = 256

local now = now_ms()
local leader = {}
if max_leader > 0 then
  leader = redis.call('ZRANGEBYSCORE', LEADER, '-inf', now, 'LIMIT', 0, max_leader)
  for _, m in ipairs(leader) do redis.call('ZADD', LEADER, now + leader_timeout_ms, m) end
end

local expired = redis.call('ZRANGEBYSCORE', LEASES, '-inf', now, 'LIMIT', 0, tonumber(ARGV[6]))

-- A limit's cap in this shard: a pool's slot count or a key's limit is split over the
-- shards (their shares add up to it); a job's max_running is its own, its job in one shard.
local function shard_share(total)
  local share = math.floor(total / shards)
  if shard < total % shards then share = share + 1 end
  return share
end
local function cap_of(id, cap)
  local kind = string.sub(id, 1, 2)
  if kind == LIMIT_KIND.JOB then return cap end
  if kind == LIMIT_KIND.POOL then
    cap = tonumber(redis.call('HGET', LIMITS, LIMIT_FIELD.POOL_TOTAL .. string.sub(id, 3)) or 0)
  end
  return shard_share(cap)
end
local function used_of(id) return tonumber(redis.call('HGET', SLOTS, id) or 0) end

-- Parked entries sort as the queue does: by score (-priority), then by member.
local parked_prefix = SLOT.parked_prefix
local function parked_entry(qname, id, score, member)
  return parked_prefix(qname, id) .. string.format('%010d',
    tonumber(score) + ORDER_OFFSET) .. '|' .. member
end
local function first_parked(qname, id) return SLOT.first_parked(PARKED, qname, id) end

local function park(qname, l, cap, score, member, lease)
  local entry = parked_entry(qname, l.id, score, member)
  redis.call('ZADD', PARKED, 0, entry)
  redis.call('HSET', LIMITS, LIMIT_FIELD.PARKED_AT .. lease, entry, LIMIT_FIELD.CAP .. l.id, cap)
  SLOT.count_parked(LIMITS, l.id, 1)
end

-- What a rate-limited queue (target: its name) or pool (target: its limit id "p:<pool>")
-- may still start now, and the window to charge them to: nil when it has no rate limit.
local function rate_window(target, read)
  local rate = read
  if read == nil then rate = redis.call('HGET', LIMITS, LIMIT_FIELD.RATE .. target) end
  if not rate then return nil end
  local n, period = string.match(rate, '^(%d+)/(%d+)$')
  n, period = shard_share(tonumber(n)), tonumber(period)
  local w = redis.call('HGET', LIMITS, LIMIT_FIELD.RATE_WINDOW .. target)
  local start, count = now, 0
  if w then
    local s, c = string.match(w, '^(%d+)|(%d+)$')
    if now < tonumber(s) + period then start, count = tonumber(s), tonumber(c) end
  end
  return {left = math.max(0, n - count), start = start, count = count, ends = start + period}
end

local next_due = -1 -- ms until a retry is due or a rate window ends (-1: none)
local function due_in(ms)
  if next_due < 0 or ms < next_due then next_due = ms end
end

-- Take the slots of a popped task with limits; false (and the task parked) if one is full
-- or a task ahead of it in this queue waits for one.
local function take_slots(qname, member, score, job, lease, spec)
  if redis.call('HEXISTS', SLOTS, lease) == 1 then return true end -- a duplicate entry: held
  local limits = SLOT.parse_limits(spec, job)
  local rated = {}
  for _, l in ipairs(limits) do
    local cap = cap_of(l.id, l.cap)
    local full = used_of(l.id) + l.n > cap
    local rate = string.sub(l.id, 1, 2) == LIMIT_KIND.POOL and rate_window(l.id)
    if rate and not full then
      rated[#rated + 1] = {id = l.id, rate = rate}
      if rate.left <= 0 then -- its pool started all its window allows: wait for the next
        full = true
        redis.call('SADD', FREED, l.id)
        due_in(rate.ends - now)
      end
    end
    if not full and redis.call('HEXISTS', LIMITS, LIMIT_FIELD.PARKED .. l.id) == 1 then
      local ahead = first_parked(qname, l.id)
      full = ahead ~= nil and ahead < parked_entry(qname, l.id, score, member)
    end
    if full then
      park(qname, l, cap, score, member, lease)
      return false
    end
  end
  local held = {}
  for _, l in ipairs(limits) do
    redis.call('HINCRBY', SLOTS, l.id, l.n)
    held[#held + 1] = l.id .. '*' .. l.n
  end
  redis.call('HSET', SLOTS, lease, table.concat(held, ';'))
  for _, r in ipairs(rated) do
    redis.call('HSET', LIMITS, LIMIT_FIELD.RATE_WINDOW .. r.id,
      r.rate.start .. '|' .. r.rate.count + 1)
  end
  return true
end

-- Limits that gave slots back while tasks wait for them: put this queue's waiting tasks
-- back in it, in order, as many as the room fits (the pops below then take them).
local freed = redis.call('SMEMBERS', FREED)
local function room_of(id)
  local cap = tonumber(redis.call('HGET', LIMITS, LIMIT_FIELD.CAP .. id) or 0)
  if string.sub(id, 1, 2) == LIMIT_KIND.POOL then cap = cap_of(id, 0) end
  local room = cap - used_of(id)
  local rate = string.sub(id, 1, 2) == LIMIT_KIND.POOL and rate_window(id)
  if rate and rate.left < room then room = rate.left end
  return room
end
local function unpark_queue(qname, ready)
  for _, id in ipairs(freed) do
    local room = room_of(id)
    if room > 0 then
      local prefix = parked_prefix(qname, id)
      local entries = redis.call('ZRANGEBYLEX', PARKED, '[' .. prefix, '(' .. prefix .. ':',
        'LIMIT', 0, UNPARKED_MAX)
      for _, entry in ipairs(entries) do
        local order, member = string.match(string.sub(entry, #prefix + 1), '^(%d+)|(.*)$')
        local job, index, spec = string.match(member, '^%d+|([^|]+)|(%d+)|(.*)$')
        local n = 0
        for _, l in ipairs(SLOT.parse_limits(spec, job)) do if l.id == id then n = l.n end end
        if n > room then break end
        room = room - n
        redis.call('ZREM', PARKED, entry)
        redis.call('ZADD', ready, tonumber(order) - ORDER_OFFSET, member)
        redis.call('HDEL', LIMITS, LIMIT_FIELD.PARKED_AT .. job .. '|' .. tonumber(index))
        SLOT.count_parked(LIMITS, id, -1)
      end
    end
  end
end

local reserved, newer = {}, {}
local parked_left = PARKED_MAX
local jobs_paused = false -- whether the shard has paused jobs: read with the first queue's flags
local function job_paused(job)
  return jobs_paused and redis.call('HEXISTS', LIMITS, LIMIT_FIELD.PAUSED_JOB .. job) == 1
end
for k = 9, #KEYS, 3 do
  local ready, delayed, wake_key = KEYS[k], KEYS[k + 1], KEYS[k + 2]
  local qname = ARGV[9 + (k - 9) / 3]
  local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, RETRIES_MOVED_MAX)
  for _, d in ipairs(due) do
    local prio, member = string.match(d, '^(-?%d+)|(.*)$')
    redis.call('ZADD', ready, -tonumber(prio), member)
    redis.call('ZREM', delayed, d)
  end
  if #freed > 0 then unpark_queue(qname, ready) end
  -- the queue's rate limit and pause, and the shard's paused jobs, in one read
  local flags = redis.call('HMGET', LIMITS, LIMIT_FIELD.RATE .. qname,
    LIMIT_FIELD.PAUSED_QUEUE .. qname, LIMIT_FIELD.PAUSED_JOBS)
  jobs_paused = flags[3] ~= false
  local wanted = want > 0 and not flags[2] -- paused: nothing taken (retries still come due)
  local rate = wanted and rate_window(qname, flags[1])
  local rate_left = rate and rate.left or want
  if not wanted then rate_left = 0 end
  local before, emptied, skipped, newest = want, false, 0, 0
  while want > 0 and rate_left > 0 and parked_left > 0 and skipped < NEWER_SKIPPED_MAX do
    local asked = math.min(want, rate_left)
    -- read, not popped: what this release cannot run stays where it is
    local head = redis.call('ZRANGE', ready, skipped, skipped + asked - 1, 'WITHSCORES')
    local leases, claims, taken = {}, {}, {}
    for p = 1, #head, 2 do
      local member = head[p]
      local protocol = tonumber(string.match(member, ENTRY_PROTOCOL) or 1) -- unmarked: 1
      if protocol > PROTOCOL then
        skipped = skipped + 1
        newest = math.max(newest, protocol)
      else
        taken[#taken + 1] = member
        local job, index, spec = string.match(member, '^%d+|([^|]+)|(%d+)|?(.*)$')
        local lease = job .. '|' .. tonumber(index) -- leases name the unpadded index
        if job_paused(job) then
          park(qname, {id = LIMIT_KIND.PAUSED .. job}, 0, head[p + 1], member, lease)
          parked_left = parked_left - 1
        elseif spec == '' or take_slots(qname, member, head[p + 1], job, lease, spec) then
          leases[#leases + 1] = now + lease_ms
          leases[#leases + 1] = lease
          claims[#claims + 1] = lease
          claims[#claims + 1] = handler
          reserved[#reserved + 1] = member
          want = want - 1
          rate_left = rate_left - 1
        else
          parked_left = parked_left - 1
        end
      end
    end
    call_chunked('ZREM', ready, taken)
    call_chunked('ZADD', LEASES, leases)
    call_chunked('HSET', CLAIMS, claims)
    emptied = #head < 2 * asked
    if emptied then break end -- the queue is empty (but for what was passed over)
  end
  if newest > 0 then newer[#newer + 1] = newest .. '|' .. qname end
  if rate and before > want then
    redis.call('HSET', LIMITS, LIMIT_FIELD.RATE_WINDOW .. qname,
      rate.start .. '|' .. rate.count + before - want)
  end
  -- what is left in the queue (read to its end: what it passed over), and more that this
  -- release can run: not only what it passed over (no wake-up ping-pong)
  local left = wanted and (emptied and skipped or redis.call('ZCARD', ready))
  local more = wanted and skipped < NEWER_SKIPPED_MAX and left > skipped
  if rate and rate_left <= 0 and more then -- the queue waits for the window's end: say when,
    due_in(rate.ends - now) -- so workers wake then
  elseif more then
    wake(wake_key, 1) -- more is ready: wake another idle worker rather than leave it asleep
  elseif left == 0 and before == want then
    -- a claim for nothing: the tokens still in the queue's wake list announced tasks taken
    -- already (completions take most of a burst). Each would cost an idle worker another
    -- claim for nothing, holding its free slots meanwhile (a completion then cannot fill
    -- them with the children it releases: they wait for a claim), so they go; what is
    -- queued next pushes its own.
    redis.call('DEL', wake_key)
  end
  local first = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
  if first[2] then due_in(math.max(0, tonumber(first[2]) - now)) end
end
-- a limit stays marked freed while it has room and tasks wait for it (maybe in a queue
-- this worker does not serve), and while a pool's rate window holds them back: the claims
-- after it ends put them back
for _, id in ipairs(freed) do
  local rate = string.sub(id, 1, 2) == LIMIT_KIND.POOL and rate_window(id)
  if redis.call('HEXISTS', LIMITS, LIMIT_FIELD.PARKED .. id) == 0 then
    redis.call('SREM', FREED, id)
  elseif rate and rate.left <= 0 then
    due_in(rate.ends - now)
  elseif room_of(id) <= 0 then
    redis.call('SREM', FREED, id)
  end
end
return {leader, expired, reserved, next_due, newer}
