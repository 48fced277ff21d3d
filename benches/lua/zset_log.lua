-- The classic sorted-set sliding-window log, as benches/compare.py
-- measures it on Turnstile and Redis: this project's own text, so it runs
-- in Turnstile's Lua VM (the native catalogue holds only scripts a library
-- ships). One member per admitted request, scored by the server's TIME in
-- microseconds.
-- ARGV: limit, window in seconds. Returns {allowed, count before}.
local now = redis.call('TIME')
local current_timestamp_us = (tonumber(now[1]) * 1000000) + tonumber(now[2])
local window_start_us = current_timestamp_us - (tonumber(ARGV[2]) * 1000000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', window_start_us)
local current_count = redis.call('ZCARD', KEYS[1])
local limit = tonumber(ARGV[1])
local allowed = 0
if current_count < limit then
    redis.call('ZADD', KEYS[1], current_timestamp_us, current_timestamp_us)
    allowed = 1
end
redis.call('EXPIRE', KEYS[1], ARGV[2] + 5)
return {allowed, current_count}
