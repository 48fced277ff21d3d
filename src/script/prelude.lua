-- The sandbox and the Lua half of the `redis` library, run once when the
-- engine starts (chunk name `=turnstile`, which the error handler skips
-- when it looks for the script's line). `T` holds the Rust functions.
local T = ...
local G = _G
local rawpcall, rawxpcall, cresume = pcall, xpcall, coroutine.resume
local type, tostring, error, select, unpack = type, tostring, error, select, unpack
local setmetatable, rawget, rawset, getinfo = setmetatable, rawget, rawset, debug.getinfo
local sfind, ssub, sgsub = string.find, string.sub, string.gsub

local function pack(...)
    return { n = select('#', ...), ... }
end

-- Redis 7.0's error handler (`__redis__err__handler`): the error as a
-- table with `err`, and where in the script it happened. Frames of C
-- functions and of this file are skipped, so the line is the script's.
local function handler(err)
    if type(err) == 'userdata' then
        err = T.errtext(err)
    end
    local where
    local level = 2
    while true do
        local info = getinfo(level, 'nSl')
        if not info then
            break
        end
        if info.what ~= 'C' and info.source ~= '=turnstile' then
            where = info
            break
        end
        level = level + 1
    end
    if type(err) ~= 'table' then
        err = { err = 'ERR ' .. tostring(err) }
    end
    if where then
        err.source = where.source
        err.line = where.currentline
    end
    return err
end
T.handler = handler

-- Runs a script's function under the handler.
T.run = function(f)
    return rawxpcall(f, handler)
end

-- Redis's own `pcall`: an error table caught is handed back as its `err`
-- string. While the script is being stopped (SCRIPT KILL, or a restart
-- over every shard), nothing may catch the error that stops it.
G.pcall = function(f, ...)
    local r = pack(rawpcall(f, ...))
    if not r[1] then
        if T.stopping() then
            error(r[2], 0)
        end
        local e = r[2]
        if type(e) == 'table' then
            local s = rawget(e, 'err')
            if type(s) == 'string' or type(s) == 'number' then
                r[2] = s
            end
        elseif type(e) == 'userdata' then
            local x = T.errtext(e)
            if type(x) == 'table' then
                x = x.err
            end
            r[2] = x
        end
    end
    return unpack(r, 1, r.n)
end
G.xpcall = function(f, h)
    local r = pack(rawxpcall(f, h))
    if not r[1] and T.stopping() then
        error(r[2], 0)
    end
    return unpack(r, 1, r.n)
end
coroutine.resume = function(co, ...)
    local r = pack(cresume(co, ...))
    if not r[1] and T.stopping() then
        error(r[2], 0)
    end
    return unpack(r, 1, r.n)
end

-- `redis.call` and `redis.pcall` are Rust functions, set on this table
-- for each run (they reach the run's host).
local redis = {}
T.redis = redis
-- Redis 7.0's `luaPushErrorBuff`: the code is the text up to the first
-- space (`ERR` when there is none), the message the rest, trimmed of CR and
-- LF; so `redis.error_reply('')` is `ERR ` and `('oops')` is `ERR oops`.
-- Both answer a bad call with an error reply (returned, not raised), as
-- Redis's C functions do.
local BAD_ARGS = 'ERR wrong number or type of arguments'
local function one_string(...)
    return select('#', ...) == 1 and type((...)) == 'string'
end
redis.error_reply = function(...)
    if not one_string(...) then
        return { err = BAD_ARGS }
    end
    local e = ...
    if ssub(e, 1, 1) ~= '-' then
        e = '-' .. e
    end
    local code, msg = 'ERR', ssub(e, 2)
    local space = sfind(e, ' ', 1, true)
    if space then
        code, msg = ssub(e, 2, space - 1), ssub(e, space + 1)
    end
    msg = sgsub(sgsub(msg, '^[\r\n]+', ''), '[\r\n]+$', '')
    return { err = code .. ' ' .. msg }
end
redis.status_reply = function(...)
    if not one_string(...) then
        return { err = BAD_ARGS }
    end
    return { ok = (...) }
end
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
redis.REPL_NONE, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA, redis.REPL_ALL = 0, 1, 2, 2, 3
redis.replicate_commands = function()
    return true
end
redis.breakpoint = function()
    return false
end
redis.debug = function() end
redis.REDIS_VERSION = T.version
redis.REDIS_VERSION_NUM = T.version_num
G.redis = redis

-- What Redis 7.0 removes from the global table.
for _, name in ipairs({ 'print', 'setfenv', 'getfenv', 'newproxy', 'dofile', 'loadfile',
    'module', 'require', 'package', 'debug', 'os', 'io' }) do
    G[name] = nil
end

-- Globals are read-only, as in Redis 7.0: the global table is emptied
-- into a backing table and reads through to it, refusing names that do
-- not exist; every assignment is refused (a chunk from `loadstring` gets
-- the same table), `rawset` refuses the protected tables, and the
-- libraries are read-only views, so no script can change what the next
-- one finds.
-- `protected` maps each read-only table to what it reads through to,
-- and `metatables` each to its real metatable, which `__metatable` hides
-- from the raw functions: `getmetatable`, `setmetatable`, `rawget`,
-- `next` and `pairs` below answer for these tables as Redis's patched Lua
-- answers for its read-only ones (the metatable readable but read-only,
-- the contents readable, every change refused).
local protected, metatables, mtviews = {}, {}, {}
local function readonly(t)
    local mt = {
        __index = t,
        __newindex = function()
            error('Attempt to modify a readonly table', 2)
        end,
        __metatable = false,
    }
    local view = setmetatable({}, mt)
    protected[view] = t
    metatables[view] = mt
    return view
end
for _, name in ipairs({ 'string', 'table', 'math', 'coroutine', 'bit', 'cjson', 'struct',
    'cmsgpack', 'redis' }) do
    G[name] = readonly(G[name])
end
local string_mt = getmetatable('')
string_mt.__index = G.string
string_mt.__metatable = false
local string_mt_view = readonly(string_mt)
T.protected = protected
G.rawset = T.rawset

do
    local getmetatable, setmetatable, rawget, next, pairs = getmetatable, setmetatable, rawget, next, pairs
    -- Each wrapper calls the raw function by its own name and not as a
    -- tail call, so an argument error names it as Lua would.
    G.getmetatable = function(...)
        local x = ...
        if type(x) == 'string' then
            return string_mt_view
        end
        local mt = metatables[x]
        if mt ~= nil then
            local view = mtviews[x]
            if view == nil then
                view = readonly(mt)
                mtviews[x] = view
            end
            return view
        end
        local r = getmetatable(...)
        return r
    end
    G.setmetatable = function(t, ...)
        if protected[t] ~= nil then
            error('Attempt to modify a readonly table', 2)
        end
        local r = setmetatable(t, ...)
        return r
    end
    G.rawget = function(t, ...)
        local r = rawget(protected[t] or t, ...)
        return r
    end
    G.next = function(t, ...)
        local k, v = next(protected[t] or t, ...)
        return k, v
    end
    G.pairs = function(t)
        local b = protected[t]
        if b ~= nil then
            return next, b, nil
        end
        local f, s, k = pairs(t)
        return f, s, k
    end
end

-- Bytecode is refused: Lua 5.1 does not verify it, and crafted bytecode
-- reads and writes the server's memory. Redis's Lua parses every chunk as
-- text, so a binary chunk (it starts with ESC, which no text chunk may)
-- fails to load: `loadstring` and `load` answer nil and an error, as for
-- any chunk that does not compile. `load`'s reader is read to the end
-- first, so no piece reaches the loader unchecked.
do
    local loadstring, concat, tostring = loadstring, table.concat, tostring
    local function text_only(s, name)
        if type(s) == 'string' and s:byte(1) == 27 then
            return nil, 'binary chunks are not accepted: scripts are loaded as text only'
        end
        local f, e = loadstring(s, name)
        return f, e
    end
    G.loadstring = text_only
    G.load = function(reader, name)
        if type(reader) ~= 'function' then
            error("bad argument #1 to 'load' (function expected, got " .. type(reader) .. ')', 0)
        end
        local parts, n = {}, 0
        while true do
            local piece = reader()
            if piece == nil or piece == '' then
                break
            end
            if type(piece) == 'number' then
                piece = tostring(piece)
            elseif type(piece) ~= 'string' then
                return nil, 'reader function must return a string'
            end
            n = n + 1
            parts[n] = piece
        end
        local f, e = text_only(concat(parts), name or '=(load)')
        return f, e
    end
end

local B = {}
for k, v in pairs(G) do
    B[k] = v
end
for k in pairs(B) do
    G[k] = nil
end
B._G = G
T.B = B
protected[G] = B
-- A read goes from the empty global table to `B` as a table, inside the
-- VM's own lookup (no call), and only a name `B` lacks reaches the
-- function that raises Redis's error; with a function as `G`'s `__index`,
-- every global a script read (`redis`, `KEYS`, `tonumber`) was a Lua call.
-- The error's level 2 is still the script's line: the hop through `B`
-- adds no frame.
setmetatable(B, {
    __index = function(_, k)
        error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
    end,
    __metatable = false,
})
local gmt = {
    __index = B,
    __newindex = function()
        error('Attempt to modify a readonly table', 2)
    end,
    __metatable = false,
}
metatables[G] = gmt
setmetatable(G, gmt)
