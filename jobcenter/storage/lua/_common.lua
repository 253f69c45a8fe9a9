--[[ _common: helpers prepended to every script, after the generated state constants.
  Defines no key: every key a script touches comes in its KEYS. ]]

-- Redis TIME in milliseconds: every stored time comes from the server, never a worker clock.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Arguments unpacked into one call: clear of Lua's limit, and even, so field/value and
-- score/member pairs never straddle two calls.
local ARGS_PER_CALL_MAX = 4000

-- redis.call(command, key, ...args) with args sent in bounded chunks (variadic commands:
-- HSET, HDEL, ZADD, ZREM, RPUSH); does nothing when args is empty.
local function call_chunked(command, key, args)
  for first = 1, #args, ARGS_PER_CALL_MAX do
    redis.call(command, key, unpack(args, first, math.min(#args, first + ARGS_PER_CALL_MAX - 1)))
  end
end

-- The same for the script's own arguments ARGV[first..last].
local function call_chunked_argv(command, key, first, last)
  for from = first, last, ARGS_PER_CALL_MAX do
    redis.call(command, key, unpack(ARGV, from, math.min(last, from + ARGS_PER_CALL_MAX - 1)))
  end
end

-- Hash `key` as a hash table, not a listpack, where every field read scans the whole hash
-- (schema.py, HASHTABLE_FIELD): a value too long for a listpack converts it for as long as
-- Redis runs; the field goes again at once.
local function as_hashtable(key)
  redis.call('HSET', key, HASHTABLE_FIELD, HASHTABLE_VALUE)
  redis.call('HDEL', key, HASHTABLE_FIELD)
end

-- A shard hash the task path reads on every call (metrics, estimates) that just got a new
-- field, now `fields` long: a hash table, unless it is past a listpack's size (Redis converted
-- it then). A new hash, or one loaded from disk after a restart or a failover, would otherwise
-- scan whole on every read until recovery's pass (hashtables.lua).
local function keep_hashtable(key, fields)
  if fields <= LISTPACK_ENTRIES_MAX then as_hashtable(key) end
end

-- tokens pushed per burst: one per task queued, up to this many idle workers (or shard
-- listeners) woken at once; each claims up to its free slots
local WAKE_TOKENS_MAX = 32
local WAKE_LIST_MAX = 64 -- tokens kept while nobody sleeps, so the list stays small

-- Push wake-up tokens that idle workers BLPOP instead of polling (one RPUSH).
local function wake(key, n)
  local tokens = {}
  for k = 1, math.min(n, WAKE_TOKENS_MAX) do tokens[k] = '1' end -- text: no formatting
  if #tokens == 0 then return end
  if redis.call('RPUSH', key, unpack(tokens)) > WAKE_LIST_MAX then
    redis.call('LTRIM', key, -WAKE_LIST_MAX, -1)
  end
end
