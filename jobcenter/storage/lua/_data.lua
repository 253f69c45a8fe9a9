--[[ _data: data flow between a job's tasks, prepended to every job script after _job.
  Results (TF_RESULT) are written by complete.lua; this file reads them back as a task's
  inputs (start.lua, complete.lua's take). Defines no key: every key comes in KEYS. ]]

-- The result a task receives from parent p: p's result (msgpack; false: none), or, when p
-- is a mapped task, the list of its instances' results in element order.
local function parent_result(p)
  local instances = redis.call('HGET', TASKS, TF_MAP_INSTANCES .. p)
  if not instances then return redis.call('HGET', TASKS, TF_RESULT .. p) or false end
  local first, count = string.match(instances, '^(%d+)|(%d+)')
  local fields = {}
  for k = tonumber(first), tonumber(first) + tonumber(count) - 1 do
    fields[#fields + 1] = TF_RESULT .. k
  end
  local results = {}
  for from = 1, #fields, ARGS_PER_CALL_MAX do
    local part = redis.call('HMGET', TASKS, unpack(fields, from, math.min(#fields,
      from + ARGS_PER_CALL_MAX - 1)))
    for _, r in ipairs(part) do results[#results + 1] = r end
  end
  return results
end

-- What task i receives as keyword arguments: {kwarg, value, kwarg, value, ...}, the values
-- as parent_result gives them; an instance of a mapped task also gets its element.
-- (inputs, origin: its TF_INPUTS and TF_MAP_OF, when the caller read them: false for none.)
local function task_inputs(i, inputs, origin)
  if inputs == nil then
    local f = redis.call('HMGET', TASKS, TF_INPUTS .. i, TF_MAP_OF .. i)
    inputs, origin = f[1], f[2]
  end
  if not inputs and not origin then return {} end
  local element_arg = nil
  if origin then -- an instance: the inputs and the map argument are its mapped task's
    local m = redis.call('HMGET', TASKS, TF_INPUTS .. origin, TF_MAP_ARG .. origin)
    inputs, element_arg = m[1], string.match(m[2] or '', '^([^=]+)=')
  end
  local out = {}
  for name, p in string.gmatch(inputs or '', '([^=,]+)=(%d+)') do
    out[#out + 1] = name
    out[#out + 1] = parent_result(p)
  end
  if element_arg then
    out[#out + 1] = element_arg
    out[#out + 1] = redis.call('HGET', TASKS, TF_MAP_ELEMENT .. i) or false
  end
  return out
end

-- Run-time fan-out. A mapped task m (TF_MAP_ARG "<kwarg>=<source>") never runs itself:
-- when its source succeeds, it is expanded into one instance per element of the source's
-- result (instances take new indexes at the end of the job, TF_MAP_INSTANCES), and once
-- every instance succeeded it succeeds (a join), releasing its children. The expansion is
-- written in bounded chunks from the frontier ('x' entries, drain_frontier); its cursor is
-- stored with the task, so a repeated entry goes on from it and never writes twice.
local MAP_ELEMENTS_MAX = 10000 -- instances per mapped task: a job stays a bounded set of hashes

-- A big-endian unsigned integer of n bytes after position `at` of s.
local function be_uint(s, at, n)
  local v = 0
  for k = 1, n do v = v * 256 + string.byte(s, at + k) end
  return v
end

-- The msgpack header sizes, built on the first use (a map expansion), not by every call.
local MSGPACK = {}

-- The tasks a script hands the worker ({index, attempt, payload, inputs, run order, has
-- children} each) as one msgpack string: Redis 6.2 sends each nested array of a reply with a
-- write() of its own (up to seven a task), one string goes out in one. Lua's false stays
-- false. (Where the server's Lua has no cmsgpack, as fakeredis', the list as it is.)
function MSGPACK.tasks(list)
  local cmsgpack = rawget(_G, 'cmsgpack')
  if cmsgpack then return cmsgpack.pack(list) end
  return list
end
function MSGPACK.sizes()
  if not MSGPACK.fixed then
    MSGPACK.fixed = {[0xca] = 5, [0xcb] = 9, [0xcc] = 2, [0xcd] = 3, [0xce] = 5, [0xcf] = 9,
      [0xd0] = 2, [0xd1] = 3, [0xd2] = 5, [0xd3] = 9, [0xd4] = 3, [0xd5] = 4, [0xd6] = 6,
      [0xd7] = 10, [0xd8] = 18, [0xc0] = 1, [0xc2] = 1, [0xc3] = 1}
    MSGPACK.sized = {[0xc4] = 1, [0xd9] = 1, [0xc5] = 2, [0xda] = 2, [0xc6] = 4,
      [0xdb] = 4} -- bin, str
    MSGPACK.ext = {[0xc7] = 1, [0xc8] = 2, [0xc9] = 4}
  end
  return MSGPACK.fixed, MSGPACK.sized, MSGPACK.ext
end

-- The msgpack item at pos: the bytes of its own header and payload, and how many values it
-- holds (containers). nil: not msgpack (0xc1, or past the end).
local function msgpack_item(s, pos)
  local FIXED_SIZES, SIZED, EXT = MSGPACK.sizes()
  local b = string.byte(s, pos)
  if not b then return nil end
  if b <= 0x7f or b >= 0xe0 then return 1, 0 end
  if b <= 0x8f then return 1, 2 * (b - 0x80) end
  if b <= 0x9f then return 1, b - 0x90 end
  if b <= 0xbf then return 1 + b - 0xa0, 0 end
  if FIXED_SIZES[b] then return FIXED_SIZES[b], 0 end
  if SIZED[b] then return 1 + SIZED[b] + be_uint(s, pos, SIZED[b]), 0 end
  if EXT[b] then return 2 + EXT[b] + be_uint(s, pos, EXT[b]), 0 end
  if b == 0xdc then return 3, be_uint(s, pos, 2) end
  if b == 0xdd then return 5, be_uint(s, pos, 4) end
  if b == 0xde then return 3, 2 * be_uint(s, pos, 2) end
  if b == 0xdf then return 5, 2 * be_uint(s, pos, 4) end
  return nil
end

-- The position right after the msgpack value at pos (iterative: any depth), nil if malformed.
local function msgpack_skip(s, pos)
  local pending = 1
  while pending > 0 do
    local size, inner = msgpack_item(s, pos)
    if not size then return nil end
    pos = pos + size
    pending = pending - 1 + inner
  end
  if pos > #s + 1 then return nil end
  return pos
end

-- What a msgpack value is, for an error message.
local function msgpack_kind(s)
  local b = string.byte(s, 1) or 0xc0
  if b <= 0x7f or b >= 0xe0 or (b >= 0xcc and b <= 0xd3) then return 'an int' end
  if b <= 0x8f or b == 0xde or b == 0xdf then return 'a dict' end
  if (b >= 0xa0 and b <= 0xbf) or (b >= 0xd9 and b <= 0xdb) then return 'a str' end
  if b == 0xc0 then return 'None' end
  if b == 0xc2 or b == 0xc3 then return 'a bool' end
  if b == 0xca or b == 0xcb then return 'a float' end
  if b >= 0xc4 and b <= 0xc6 then return 'bytes' end
  return 'not a list'
end

-- The element count of a msgpack list and the position of its first element; nil if s
-- is not a list.
local function msgpack_list(s)
  local b = string.byte(s, 1)
  if not b then return nil end
  if b >= 0x90 and b <= 0x9f then return b - 0x90, 2 end
  if b == 0xdc then return be_uint(s, 1, 2), 4 end
  if b == 0xdd then return be_uint(s, 1, 4), 6 end
  return nil
end

-- Every instance of m succeeded: m succeeds too (it ran nothing) and releases its children.
local function join_mapped(m, now)
  redis.call('HSET', TASKS, TF_STATE .. m, T_SUCCEEDED, TF_FINISHED_AT .. m, now,
    TF_UPDATED_AT .. m, now)
  push_frontier('r', m, m)
  task_finished(now)
end

-- enqueue's hook (declared in _job.lua): a mapped task is never queued. The first time its
-- dependencies are met its expansion is scheduled on the frontier (and a 'continue'
-- message, for callers that do not drain it); once expanded, all its instances succeeded:
-- it joins. Returns false for any other task.
map_ready = function(i, now)
  local f = redis.call('HMGET', TASKS, TF_MAP_ARG .. i, TF_MAP_INSTANCES .. i)
  if not f[1] then return false end
  if f[2] then
    join_mapped(i, now)
  else -- waiting (revive may bring one back from failed: its source's result was no list)
    redis.call('HSET', TASKS, TF_STATE .. i, T_WAITING, TF_UPDATED_AT .. i, now)
    redis.call('HDEL', TASKS, TF_ERROR .. i, TF_FINISHED_AT .. i)
    redis.call('RPUSH', FRONTIER, 'x|' .. i .. '|0|0')
    leader_message('continue', now)
  end
  return true
end

-- Recovery's lost release of an expanded mapped task (repair.lua): an expansion whose
-- frontier entry was lost is scheduled again (its cursor says where it stopped). True if
-- it was. A fully written one is left to its instances: they release it.
local function map_resume(m, now)
  local instances = redis.call('HGET', TASKS, TF_MAP_INSTANCES .. m)
  local _, count, written = string.match(instances or '', '^(%d+)|(%d+)|(%d+)')
  if not count or tonumber(written) >= tonumber(count) then return false end
  redis.call('RPUSH', FRONTIER, 'x|' .. m .. '|0|0')
  leader_message('continue', now)
  return true
end

-- Validate m's source result and reserve the instances' indexes; false (m failed, and its
-- descendants cascade) when the result is not a list of at most MAP_ELEMENTS_MAX elements.
local function start_expansion(m, list, source, now)
  local count, offset = msgpack_list(list)
  local source_id = redis.call('HGET', TASKS, TF_ID .. source) or source
  local err = nil
  if not count then
    err = 'map: task ' .. source_id .. ' returned ' .. msgpack_kind(list) .. ', not a list'
  elseif count > MAP_ELEMENTS_MAX then
    err = 'map: task ' .. source_id .. ' returned a list of ' .. count .. ' elements; a map '
      .. 'takes at most ' .. MAP_ELEMENTS_MAX
  end
  if err then
    fail_task(m, now, err)
    return false
  end
  local first = tonumber(redis.call('HGET', JOB, JOB_FIELD.TASKS))
  redis.call('HSET', JOB, JOB_FIELD.TASKS, first + count)
  redis.call('HSET', TASKS, TF_MAP_INSTANCES .. m, table.concat({first, count, 0, offset}, '|'),
    TF_DEPS_LEFT .. m, count, TF_UPDATED_AT .. m, now)
  tasks_as_hashtable(first + count)
  if count == 0 then join_mapped(m, now) end
  return true
end

-- drain_frontier's 'x' entry: write up to `budget` more instances of m (starting its
-- expansion on the first visit); returns the budget left. A cancelled job or an m that
-- ended meanwhile writes nothing more.
map_expand = function(m, budget, now)
  local f = redis.call('HMGET', TASKS, TF_MAP_ARG .. m, TF_STATE .. m, TF_MAP_INSTANCES .. m)
  if f[2] ~= T_WAITING or redis.call('HEXISTS', JOB, JOB_FIELD.STOP) == 1 then return budget end
  local source = string.match(f[1], '=(%d+)$')
  local list = redis.call('HGET', TASKS, TF_RESULT .. source) or ''
  if not f[3] then
    if not start_expansion(m, list, source, now) then return budget - 1 end
    f[3] = redis.call('HGET', TASKS, TF_MAP_INSTANCES .. m)
  end
  local first, count, j, offset = string.match(f[3], '^(%d+)|(%d+)|(%d+)|(%d+)$')
  first, count, j, offset = tonumber(first), tonumber(count), tonumber(j), tonumber(offset)
  if j >= count then return budget end
  local t = redis.call('HMGET', TASKS, TF_ID .. m, TF_PAYLOAD .. m, TF_QUEUE .. m, TF_PRIORITY .. m,
    TF_MAX_ATTEMPTS .. m, TF_RANK .. m, TF_LIMITS .. m)
  -- an instance takes its mapped task's pool and limit slots (_slots.lua) too
  local copied = {{TF_QUEUE, t[3]}, {TF_PRIORITY, t[4]}, {TF_MAX_ATTEMPTS, t[5]}, {TF_RANK, t[6]},
                  {TF_LIMITS, t[7]}}
  local fields, written = {}, {}
  while j < count and budget > 0 do
    local k = first + j
    local after = msgpack_skip(list, offset) or (#list + 1)
    for _, v in ipairs({TF_ID .. k, t[1] .. '[' .. j .. ']', TF_STATE .. k, T_WAITING,
        TF_PAYLOAD .. k, t[2], TF_CHILDREN .. k, m, TF_MAP_OF .. k, m,
        TF_MAP_ELEMENT .. k, string.sub(list, offset, after - 1), TF_CREATED_AT .. k, now}) do
      fields[#fields + 1] = v
    end
    for _, c in ipairs(copied) do
      if c[2] then
        fields[#fields + 1] = c[1] .. k
        fields[#fields + 1] = c[2]
      end
    end
    written[#written + 1] = k
    offset, j, budget = after, j + 1, budget - 1
  end
  call_chunked('HSET', TASKS, fields)
  redis.call('HSET', TASKS, TF_MAP_INSTANCES .. m, table.concat({first, count, j, offset}, '|'))
  META.left = redis.call('HINCRBY', JOB, JOB_FIELD.LEFT, #written)
  for _, k in ipairs(written) do enqueue(k, now) end
  if j < count then redis.call('LPUSH', FRONTIER, 'x|' .. m .. '|0|0') end
  return budget
end
