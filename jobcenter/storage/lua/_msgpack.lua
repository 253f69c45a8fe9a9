--[[ _msgpack: a msgpack encoder in plain Lua (no cmsgpack, no bit: see STYLE.md), prepended
  to job scripts after _common, for the packed record of a finished job (compaction). It
  encodes only what the record holds: nil, non-negative integers, byte strings (as msgpack
  bin, read back as bytes), short text keys (fixstr), arrays and maps. Defines no key. ]]

local MP_NIL = '\192'

-- n (a non-negative integer below 2^32) big-endian in 2 or 4 bytes: no tables, no loops,
-- since this runs for every number of a record.
local function mp_be2(n) return string.char(math.floor(n / 256), n % 256) end
local function mp_be4(n)
  return string.char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256,
    math.floor(n / 256) % 256, n % 256)
end

local function mp_uint(n)
  if n < 128 then return string.char(n) end
  if n < 256 then return '\204' .. string.char(n) end
  if n < 65536 then return '\205' .. mp_be2(n) end
  if n < 4294967296 then return '\206' .. mp_be4(n) end
  return '\207' .. mp_be4(math.floor(n / 4294967296)) .. mp_be4(n % 4294967296)
end

local function mp_bin(s)
  local n = #s
  if n < 256 then return '\196' .. string.char(n) .. s end
  if n < 65536 then return '\197' .. mp_be2(n) .. s end
  return '\198' .. mp_be4(n) .. s
end

-- A map key: a short name (under 32 bytes).
local function mp_key(s) return string.char(160 + #s) .. s end

local function mp_array_head(n)
  if n < 16 then return string.char(144 + n) end
  if n < 65536 then return '\220' .. mp_be2(n) end
  return '\221' .. mp_be4(n)
end

local function mp_map_head(n)
  if n < 16 then return string.char(128 + n) end
  return '\222' .. mp_be2(n)
end

-- A map of short keys to encoded values, in the order of `names` (nil values left out).
local function mp_map(names, encoded)
  local parts, count = {}, 0
  for _, name in ipairs(names) do
    if encoded[name] then
      parts[#parts + 1] = mp_key(name) .. encoded[name]
      count = count + 1
    end
  end
  return mp_map_head(count) .. table.concat(parts)
end

--[[ A column of n stored values (false/nil: absent) in the smallest of three forms the
  reader (jobcenter/storage/packed.py) expands:
    {b = base, v = [value - base or nil]}  an integer column (INT_COLUMNS: times, counters)
    {d = [distinct values], x = [index or nil]}  few distinct values (states, handlers)
    [value or nil]  anything else
  Which columns hold integers comes from the schema, so no value is pattern-matched; one
  that is not a non-negative integer after all sends its column down the other forms.
  Returns nil when every value is absent (the column is left out). ]]
local function mp_int_column(values, n)
  local nums, base = {}, nil
  for k = 1, n do
    local v = values[k]
    if v then
      local num = tonumber(v)
      if not num or num < 0 or num % 1 ~= 0 then return nil end
      nums[k] = num
      if not base or num < base then base = num end
    end
  end
  if not base then return false end
  local parts = {}
  for k = 1, n do
    local num = nums[k]
    parts[k] = num and mp_uint(num - base) or MP_NIL
  end
  return mp_map({PR.BASE, PR.VALUES}, {[PR.BASE] = mp_uint(base),
    [PR.VALUES] = mp_array_head(n) .. table.concat(parts)})
end

local function mp_column(name, values, n)
  if INT_COLUMNS[name] then
    local encoded = mp_int_column(values, n)
    if encoded ~= nil then return encoded or nil end
  end
  local present, distinct, order = 0, {}, {}
  for k = 1, n do
    local v = values[k]
    if v then
      present = present + 1
      if not distinct[v] then
        order[#order + 1] = v
        distinct[v] = #order - 1
      end
    end
  end
  if present == 0 then return nil end
  local parts = {}
  if #order * 2 <= present then
    local dict = {}
    for k, v in ipairs(order) do dict[k] = mp_bin(v) end
    for k = 1, n do
      local v = values[k]
      parts[k] = v and mp_uint(distinct[v]) or MP_NIL
    end
    return mp_map({PR.DICT, PR.INDEXES}, {[PR.DICT] = mp_array_head(#dict) .. table.concat(dict),
                                          [PR.INDEXES] = mp_array_head(n) .. table.concat(parts)})
  end
  for k = 1, n do
    local v = values[k]
    parts[k] = v and mp_bin(v) or MP_NIL
  end
  return mp_array_head(n) .. table.concat(parts)
end
