--[[ _msgpack: a msgpack encoder in plain Lua (no cmsgpack, no bit: see STYLE.md), prepended
  to job scripts after _common, for the packed record of a finished job (compaction). It
  encodes only what the record holds: nil, non-negative integers, byte strings (as msgpack
  bin, read back as bytes), short text keys (fixstr), arrays and maps. Defines no key. ]]

local MP_NIL = '\192'

-- n (a non-negative integer below 2^53) big-endian in `width` bytes.
local function mp_be(n, width)
  local out = {}
  for k = width, 1, -1 do
    out[k] = string.char(n % 256)
    n = math.floor(n / 256)
  end
  return table.concat(out)
end

local function mp_uint(n)
  if n < 128 then return string.char(n) end
  if n < 256 then return '\204' .. string.char(n) end
  if n < 65536 then return '\205' .. mp_be(n, 2) end
  if n < 4294967296 then return '\206' .. mp_be(n, 4) end
  return '\207' .. mp_be(n, 8)
end

local function mp_bin(s)
  local n = #s
  if n < 256 then return '\196' .. string.char(n) .. s end
  if n < 65536 then return '\197' .. mp_be(n, 2) .. s end
  return '\198' .. mp_be(n, 4) .. s
end

-- A map key: a short name (under 32 bytes).
local function mp_key(s) return string.char(160 + #s) .. s end

local function mp_array_head(n)
  if n < 16 then return string.char(144 + n) end
  if n < 65536 then return '\220' .. mp_be(n, 2) end
  return '\221' .. mp_be(n, 4)
end

local function mp_map_head(n)
  if n < 16 then return string.char(128 + n) end
  return '\222' .. mp_be(n, 2)
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

-- The integer a stored value spells in canonical decimal (what Redis keeps for times,
-- counters, attempts), or nil: read back, tostring of it gives the same bytes.
local function mp_decimal(v)
  if #v <= 15 and (v == '0' or string.find(v, '^[1-9]%d*$')) then return tonumber(v) end
  return nil
end

--[[ A column of n stored values (false/nil: absent) in the smallest of three forms the
  reader (jobcenter/storage/packed.py) expands:
    {b = base, v = [value - base or nil]}  all present values are decimal integers (times)
    {d = [distinct values], x = [index or nil]}  few distinct values (states, handlers)
    [value or nil]  anything else
  Returns nil when every value is absent (the column is left out). ]]
local function mp_column(values, n)
  local ints, base, present = true, nil, 0
  local distinct, order = {}, {}
  for k = 1, n do
    local v = values[k]
    if v then
      present = present + 1
      local num = ints and mp_decimal(v)
      if num then
        if not base or num < base then base = num end
      else
        ints = false
      end
      if not distinct[v] then
        order[#order + 1] = v
        distinct[v] = #order - 1
      end
    end
  end
  if present == 0 then return nil end
  local parts = {}
  if ints then
    for k = 1, n do
      parts[k] = values[k] and mp_uint(tonumber(values[k]) - base) or MP_NIL
    end
    return mp_map({'b', 'v'}, {b = mp_uint(base), v = mp_array_head(n) .. table.concat(parts)})
  end
  if #order * 2 <= present then
    local dict = {}
    for k, v in ipairs(order) do dict[k] = mp_bin(v) end
    for k = 1, n do
      parts[k] = values[k] and mp_uint(distinct[values[k]]) or MP_NIL
    end
    return mp_map({'d', 'x'}, {d = mp_array_head(#dict) .. table.concat(dict),
                               x = mp_array_head(n) .. table.concat(parts)})
  end
  for k = 1, n do parts[k] = values[k] and mp_bin(values[k]) or MP_NIL end
  return mp_array_head(n) .. table.concat(parts)
end
