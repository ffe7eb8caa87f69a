"""The Lua scripts of the Redis store: each is one atomic step on the server (docs/stores.md, "Redis").

Keys, under the URL's prefix P:
  P r:{id}                  hash: o owner, p parent ("" for none), c created_at, b response JSON, i input items,
                            x output items (blobs, codec.encode_blob), s size in bytes, ids item ids (JSON list)
  P age                     sorted set: response id by created_at (TTL sweeps, oldest first for the byte budget)
  P bytes                   the stored bytes, moved in the same script as every save and delete
  P it:{owner}:{item_id}    the response holding an item (item_reference), per owner
  P u:{response_id}         a usage record (JSON); P uo:{owner}, P um:{owner}:{model}: sorted sets by created_at;
                            P ut:{owner}, P utm:{owner}:{model}: hashes of totals (n, in, ca, out)
  channel P deleted         the id of every deleted response (DELETE, TTL, byte budget)
  P c:{conversation_id}     hash: o owner, c created_at, m metadata (JSON), n next position (never reused)
  P cp:{conversation_id}    sorted set: the item positions (member and score), in order
  P ci:{conversation_id}    hash: position -> the item (a one-item blob, codec.encode_blob)
  P cx:{conversation_id}    hash: item id -> position (ids are unique within a conversation)
Scripts touch keys they compute (the parent walk cannot name them up front), so the store needs one Redis, not a
cluster.
"""

from __future__ import annotations

# Delete one response everywhere and announce it; false when it was not there.
_REMOVE = """
local function remove(p, id)
  redis.call('ZREM', p .. 'age', id)
  local key = p .. 'r:' .. id
  local r = redis.call('HMGET', key, 'o', 's', 'ids')
  if not r[1] then return false end
  redis.call('DEL', key)
  redis.call('DECRBY', p .. 'bytes', r[2])
  for _, item in ipairs(cjson.decode(r[3])) do
    local ik = p .. 'it:' .. r[1] .. ':' .. item
    if redis.call('GET', ik) == id then redis.call('DEL', ik) end
  end
  redis.call('PUBLISH', p .. 'deleted', id)
  return true
end
"""

# ARGV: prefix, id, owner, parent, created_at, body, inputs, outputs, size, item ids (JSON).
SAVE = """
local p, id, owner = ARGV[1], ARGV[2], ARGV[3]
local key = p .. 'r:' .. id
local old = redis.call('HMGET', key, 's', 'ids', 'o')
if old[1] then
  redis.call('DECRBY', p .. 'bytes', old[1])
  for _, item in ipairs(cjson.decode(old[2])) do
    local ik = p .. 'it:' .. old[3] .. ':' .. item
    if redis.call('GET', ik) == id then redis.call('DEL', ik) end
  end
end
redis.call('HSET', key, 'o', owner, 'p', ARGV[4], 'c', ARGV[5], 'b', ARGV[6], 'i', ARGV[7], 'x', ARGV[8],
  's', ARGV[9], 'ids', ARGV[10])
redis.call('ZADD', p .. 'age', ARGV[5], id)
redis.call('INCRBY', p .. 'bytes', ARGV[9])
for _, item in ipairs(cjson.decode(ARGV[10])) do
  redis.call('SET', p .. 'it:' .. owner .. ':' .. item, id)
end
return 1
"""

# ARGV: prefix, id, owner. 1 when deleted, 0 when unknown to this owner.
DELETE = (
    _REMOVE
    + """
local p, id = ARGV[1], ARGV[2]
if redis.call('HGET', p .. 'r:' .. id, 'o') ~= ARGV[3] then return 0 end
remove(p, id)
return 1
"""
)

# ARGV: prefix, before (epoch seconds), limit. The ids deleted.
EXPIRE = (
    _REMOVE
    + """
local p = ARGV[1]
local ids = redis.call('ZRANGEBYSCORE', p .. 'age', '-inf', '(' .. ARGV[2], 'LIMIT', 0, ARGV[3])
for _, id in ipairs(ids) do remove(p, id) end
return ids
"""
)

# ARGV: prefix, max bytes, limit. Oldest first while over budget; the ids deleted.
TRIM = (
    _REMOVE
    + """
local p, budget, limit = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {}
while tonumber(redis.call('GET', p .. 'bytes') or '0') > budget and #out < limit do
  local oldest = redis.call('ZRANGE', p .. 'age', 0, 0)
  if #oldest == 0 then break end
  remove(p, oldest[1])
  out[#out + 1] = oldest[1]
end
return out
"""
)

# ARGV: prefix, id, owner, max depth. Walks `parent` links server-side: one round trip for any chain length.
# Returns {head body, inputs, outputs, parent's inputs, parent's outputs, ...} newest first, or nil when the
# response or any ancestor is missing or another owner's.
CHAIN = """
local p, id, owner, max = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local out = {}
local depth = 0
while id do
  local r = redis.call('HMGET', p .. 'r:' .. id, 'o', 'p', 'i', 'x', 'b')
  if r[1] ~= owner then return false end
  if depth == 0 then out[1] = r[5] end
  out[#out + 1] = r[3]
  out[#out + 1] = r[4]
  if r[2] == '' then id = nil else id = r[2] end
  depth = depth + 1
  if depth > max then return false end
end
return out
"""

# ARGV: prefix, owner, item id. {inputs, outputs} of the response holding it, or nil.
FIND_ITEM = """
local p, owner = ARGV[1], ARGV[2]
local id = redis.call('GET', p .. 'it:' .. owner .. ':' .. ARGV[3])
if not id then return false end
local r = redis.call('HMGET', p .. 'r:' .. id, 'o', 'i', 'x')
if r[1] ~= owner then return false end
return {r[2], r[3]}
"""

# ARGV: prefix, then per record: response id, owner, model, created_at, input, cached, output tokens, JSON.
# A record already there is left as it was (a retried batch writes nothing twice). The number written.
APPEND_USAGE = """
local p = ARGV[1]
local written = 0
for k = 2, #ARGV, 8 do
  local id, owner, model, created = ARGV[k], ARGV[k + 1], ARGV[k + 2], ARGV[k + 3]
  if redis.call('SET', p .. 'u:' .. id, ARGV[k + 7], 'NX') then
    redis.call('ZADD', p .. 'uo:' .. owner, created, id)
    redis.call('ZADD', p .. 'um:' .. owner .. ':' .. model, created, id)
    for _, t in ipairs({p .. 'ut:' .. owner, p .. 'utm:' .. owner .. ':' .. model}) do
      redis.call('HINCRBY', t, 'n', 1)
      redis.call('HINCRBY', t, 'in', ARGV[k + 4])
      redis.call('HINCRBY', t, 'ca', ARGV[k + 5])
      redis.call('HINCRBY', t, 'out', ARGV[k + 6])
    end
    written = written + 1
  end
end
return written
"""

# ARGV: prefix, owner, model ("" with by_model "0": every model), by_model, after ("": from the start), limit.
# {totals {n, in, ca, out}, up to limit + 1 record JSONs}. The cursor is placed by its created_at in the owner's
# set, so a page filtered by model may start after a record of another model.
USAGE_PAGE = """
local p, owner, model, by_model, after, limit = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])
local key, totals_key = p .. 'uo:' .. owner, p .. 'ut:' .. owner
if by_model == '1' then
  key, totals_key = p .. 'um:' .. owner .. ':' .. model, p .. 'utm:' .. owner .. ':' .. model
end
local totals = redis.call('HMGET', totals_key, 'n', 'in', 'ca', 'out')
local start = 0
if after ~= '' then
  local score = redis.call('ZSCORE', p .. 'uo:' .. owner, after)
  if not score then return {totals, {}} end
  -- Placed in the filtered set for a moment to find its rank; once removed, the next record has that rank.
  local added = redis.call('ZADD', key, score, after)
  start = redis.call('ZRANK', key, after) + 1 - added
  if added == 1 then redis.call('ZREM', key, after) end
end
local blobs = {}
for i, id in ipairs(redis.call('ZRANGE', key, start, start + limit)) do
  blobs[i] = redis.call('GET', p .. 'u:' .. id)
end
return {totals, blobs}
"""

# -- conversations (stores/redis_conversations.py) --------------------------------------------------------------
# append: (item id or "", blob) pairs from ARGV[first] on, after the last position; the id already in the
# conversation when there is one (then nothing is written), else false. owned: whether `owner` has it.
_CONVERSATION_FUNCTIONS = """
local function append(p, cid, first)
  local x = p .. 'cx:' .. cid
  for k = first, #ARGV, 2 do
    if ARGV[k] ~= '' and redis.call('HEXISTS', x, ARGV[k]) == 1 then return ARGV[k] end
  end
  local count = (#ARGV - first + 1) / 2
  local pos = redis.call('HINCRBY', p .. 'c:' .. cid, 'n', count) - count
  for k = first, #ARGV, 2 do
    redis.call('ZADD', p .. 'cp:' .. cid, pos, pos)
    redis.call('HSET', p .. 'ci:' .. cid, pos, ARGV[k + 1])
    if ARGV[k] ~= '' then redis.call('HSET', x, ARGV[k], pos) end
    pos = pos + 1
  end
  return false
end
local function owned(p, cid, owner)
  return redis.call('HGET', p .. 'c:' .. cid, 'o') == owner
end
"""

# ARGV: prefix, id, owner, created_at, metadata, then (item id, blob) pairs.
CREATE_CONVERSATION = (
    _CONVERSATION_FUNCTIONS
    + """
local p, cid = ARGV[1], ARGV[2]
redis.call('DEL', p .. 'c:' .. cid, p .. 'cp:' .. cid, p .. 'ci:' .. cid, p .. 'cx:' .. cid)
redis.call('HSET', p .. 'c:' .. cid, 'o', ARGV[3], 'c', ARGV[4], 'm', ARGV[5], 'n', 0)
return append(p, cid, 6) or 1
"""
)

# ARGV: prefix, id, owner, then (item id, blob) pairs. 1 appended, 0 unknown to this owner, or the id already there.
ADD_CONVERSATION_ITEMS = (
    _CONVERSATION_FUNCTIONS
    + """
local p, cid = ARGV[1], ARGV[2]
if not owned(p, cid, ARGV[3]) then return 0 end
return append(p, cid, 4) or 1
"""
)

# ARGV: prefix, id, owner, metadata. The created_at, or nil when unknown to this owner.
UPDATE_CONVERSATION = (
    _CONVERSATION_FUNCTIONS
    + """
local p, cid = ARGV[1], ARGV[2]
if not owned(p, cid, ARGV[3]) then return false end
redis.call('HSET', p .. 'c:' .. cid, 'm', ARGV[4])
return redis.call('HGET', p .. 'c:' .. cid, 'c')
"""
)

# ARGV: prefix, id, owner. 1 deleted with its items, 0 unknown to this owner.
DELETE_CONVERSATION = (
    _CONVERSATION_FUNCTIONS
    + """
local p, cid = ARGV[1], ARGV[2]
if not owned(p, cid, ARGV[3]) then return 0 end
redis.call('DEL', p .. 'c:' .. cid, p .. 'cp:' .. cid, p .. 'ci:' .. cid, p .. 'cx:' .. cid)
return 1
"""
)

# ARGV: prefix, id, owner, after ("": from the start), rows, order ("asc" / "desc"). Up to `rows` item blobs
# (an unknown `after`: none), or nil when the conversation is unknown to this owner.
CONVERSATION_ITEMS = (
    _CONVERSATION_FUNCTIONS
    + """
local p, cid, after, rows = ARGV[1], ARGV[2], ARGV[4], tonumber(ARGV[5])
if not owned(p, cid, ARGV[3]) then return false end
local from = (ARGV[6] == 'asc') and '-inf' or '+inf'
if after ~= '' then
  local at = redis.call('HGET', p .. 'cx:' .. cid, after)
  if not at then return {} end
  from = '(' .. at
end
local positions
if ARGV[6] == 'asc' then
  positions = redis.call('ZRANGEBYSCORE', p .. 'cp:' .. cid, from, '+inf', 'LIMIT', 0, rows)
else
  positions = redis.call('ZREVRANGEBYSCORE', p .. 'cp:' .. cid, from, '-inf', 'LIMIT', 0, rows)
end
local out = {}
for i, pos in ipairs(positions) do out[i] = redis.call('HGET', p .. 'ci:' .. cid, pos) end
return out
"""
)

# ARGV: prefix, id, owner, item id. The item's blob, or nil.
CONVERSATION_ITEM = (
    _CONVERSATION_FUNCTIONS
    + """
local p, cid = ARGV[1], ARGV[2]
if not owned(p, cid, ARGV[3]) then return false end
local pos = redis.call('HGET', p .. 'cx:' .. cid, ARGV[4])
if not pos then return false end
return redis.call('HGET', p .. 'ci:' .. cid, pos)
"""
)

# ARGV: prefix, id, owner, item id. 1 deleted, 0 not in the conversation, -1 conversation unknown to this owner.
DELETE_CONVERSATION_ITEM = (
    _CONVERSATION_FUNCTIONS
    + """
local p, cid = ARGV[1], ARGV[2]
if not owned(p, cid, ARGV[3]) then return -1 end
local pos = redis.call('HGET', p .. 'cx:' .. cid, ARGV[4])
if not pos then return 0 end
redis.call('HDEL', p .. 'cx:' .. cid, ARGV[4])
redis.call('HDEL', p .. 'ci:' .. cid, pos)
redis.call('ZREM', p .. 'cp:' .. cid, pos)
return 1
"""
)

# ARGV: prefix, id, owner. Every item blob, oldest first, or nil when unknown to this owner.
LOAD_CONVERSATION = (
    _CONVERSATION_FUNCTIONS
    + """
local p, cid = ARGV[1], ARGV[2]
if not owned(p, cid, ARGV[3]) then return false end
local out = {}
for i, pos in ipairs(redis.call('ZRANGE', p .. 'cp:' .. cid, 0, -1)) do
  out[i] = redis.call('HGET', p .. 'ci:' .. cid, pos)
end
return out
"""
)

CONVERSATION_SCRIPTS = (
    "CREATE_CONVERSATION",
    "ADD_CONVERSATION_ITEMS",
    "UPDATE_CONVERSATION",
    "DELETE_CONVERSATION",
    "CONVERSATION_ITEMS",
    "CONVERSATION_ITEM",
    "DELETE_CONVERSATION_ITEM",
    "LOAD_CONVERSATION",
)
