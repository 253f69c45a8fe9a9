--[[ _slots: pools and limits, prepended to claim.lua and, before _job.lua, to every job
  script. A task with limits has its queue member end in "|<limits>" (layout.py
  limit_spec): entries "<limit>=<cap>*<slots>" joined by ';', where <limit> is p:<pool>,
  j (the task's own job: max_running) or k:<concurrency key>, and <cap> is empty for a pool,
  whose slot count is the limits hash's LIMIT_FIELD.POOL_TOTAL. claim.lua takes the slots with the
  reservation and records them in the slots hash under the lease member; whatever ends the
  reservation or its attempt gives them back through free_slots, once (the record goes with
  them). A task whose limit is full waits in the parked zset, out of its queue.
  Defines no key: the callers pass the limits hash, slots hash, parked zset, freed set and
  freed wake list. ]]

local SLOT = {} -- the helpers, in one table: the main chunk may hold at most 200 locals
-- A parked entry's order is its queue score plus this (spec.MAX_PRIORITY): 0..2e9, digits
SLOT.ORDER_OFFSET = 1000000000

-- The limits of a member's "<limits>" part: {id, cap (nil: the pool's), slots} each.
function SLOT.parse_limits(spec, job)
  local out = {}
  for id, cap, n in string.gmatch(spec, '([^;=]+)=(%d*)%*(%d+)') do
    if id == 'j' then id = LIMIT_KIND.JOB .. job end
    out[#out + 1] = {id = id, cap = tonumber(cap), n = tonumber(n)}
  end
  return out
end

-- One task fewer (or more) parked for limit `id`; the counter and the cap go at 0.
function SLOT.count_parked(limits, id, delta)
  if redis.call('HINCRBY', limits, LIMIT_FIELD.PARKED .. id, delta) <= 0 then
    redis.call('HDEL', limits, LIMIT_FIELD.PARKED .. id, LIMIT_FIELD.CAP .. id)
  end
end

-- Limit `id` has `n` more slots: if tasks wait for it, the next claim puts them back in
-- their queues, and idle workers are woken to make that claim.
function SLOT.mark_freed(limits, freed, freed_wake, id, n)
  if redis.call('HEXISTS', limits, LIMIT_FIELD.PARKED .. id) == 1 then
    redis.call('SADD', freed, id)
    wake(freed_wake, n)
    SLOT.wake_parked_queues(id, n)
  end
end

-- Parked entries "<queue>|<limit>|<order>|<queue member>" of one queue and limit start with
-- this; the order is digits, so ':' ends the range.
function SLOT.parked_prefix(qname, id) return qname .. '|' .. id .. '|' end
function SLOT.first_parked(parked, qname, id)
  local prefix = SLOT.parked_prefix(qname, id)
  return redis.call('ZRANGEBYLEX', parked, '[' .. prefix, '(' .. prefix .. ':', 'LIMIT', 0, 1)[1]
end

-- Wake the workers of the queues whose tasks wait for limit `id`, where the script has
-- those queues' keys (a job script: its job's queues, _job.lua); elsewhere only the freed
-- wake list above, which may wake a worker serving none of them.
function SLOT.wake_parked_queues(_, _) end

-- Give back the slots reservation `lease` ("<job>|<index>") holds, if it holds any: once,
-- since its record goes with them. A limit that tasks wait for is marked freed, so the next
-- claim puts them back in their queues.
function SLOT.free_slots_of(limits, slots, freed, freed_wake, lease)
  local held = redis.call('HGET', slots, lease)
  if not held then return end
  redis.call('HDEL', slots, lease)
  for id, n in string.gmatch(held, '([^;]+)%*(%d+)') do
    if redis.call('HINCRBY', slots, id, -tonumber(n)) <= 0 then redis.call('HDEL', slots, id) end
    SLOT.mark_freed(limits, freed, freed_wake, id, tonumber(n))
  end
end

-- Take a queued task that leaves its queue by another way than a claim (cancel, abandon)
-- out of the parked zset too, if it waits there.
function SLOT.unpark_of(limits, parked, lease)
  local entry = redis.call('HGET', limits, LIMIT_FIELD.PARKED_AT .. lease)
  if not entry then return end
  redis.call('ZREM', parked, entry)
  redis.call('HDEL', limits, LIMIT_FIELD.PARKED_AT .. lease)
  SLOT.count_parked(limits, string.match(entry, '^[^|]*|([^|]*)|'), -1)
end

-- A job's pause ends (resumed, or the job finalized): its mark goes, with the shard's count
-- of paused jobs and the job's own field. Once: a job not paused changes nothing.
function SLOT.forget_paused_job(limits, job_key, job)
  if redis.call('HDEL', limits, LIMIT_FIELD.PAUSED_JOB .. job) == 0 then return end
  if redis.call('HINCRBY', limits, LIMIT_FIELD.PAUSED_JOBS, -1) <= 0 then
    redis.call('HDEL', limits, LIMIT_FIELD.PAUSED_JOBS)
  end
  redis.call('HDEL', job_key, JOB_FIELD.PAUSED)
end
