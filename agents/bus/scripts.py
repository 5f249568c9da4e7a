"""The bus's Lua scripts: what must be read and written in one step in Redis, where two
processes could otherwise both act on what each read (``RunBus.begin`` against
``RunBus.status`` ending a queued run, two retries taking over one Idempotency-Key)."""

# A key's run (KEYS[1]) replaced by another (ARGV[2], for ARGV[3] s) if it still is the one
# named (ARGV[1]): the key's value after. Its process being back does not matter: a run that
# never began never will (``BEGIN``).
TAKE_OVER = """
local found = redis.call('GET', KEYS[1])
if found and string.sub(found, 1, string.len(ARGV[1]) + 1) ~= ARGV[1] .. ' ' then
  return found
end
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
return ARGV[2]
"""
# A queued run begins: its status (KEYS[1]) says so (ARGV[1], for ARGV[2] s) unless another
# process ended it meanwhile (``END_QUEUED``): nil, else the status that says how it ended.
# 'running' is its own earlier try, one that timed out here but reached Redis; no status yet:
# its first write has not landed (nobody can have ended it), or it expired an hour on.
BEGIN = """
local found = redis.call('GET', KEYS[1])
if found then
  local status = cjson.decode(found)['status']
  if status ~= 'queued' and status ~= 'running' then
    return found
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return false
"""
# A queued run whose process is gone ended: its status (KEYS[1]) set to ARGV[2] and its stream
# (KEYS[2]) closed with the event ARGV[5], ARGV[6] (id ARGV[4]), for ARGV[3] s, only if the
# status still is the queued one read (ARGV[1]) and the process's alive key (KEYS[3]) is still
# absent: 1 if ended, 0 if it began or its process spoke meanwhile. The XADD comes first: an id
# taken fails the script before anything is written.
END_QUEUED = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] or redis.call('EXISTS', KEYS[3]) == 1 then
  return 0
end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[7], ARGV[4], 't', ARGV[5], 'd', ARGV[6])
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return 1
"""
