-- PATCH (approve) pending requests, each one once: thread i walks every n-th id of the
-- file. Args: ids file, thread count. Should the list run out, the walk starts over and
-- the 409 answers show up as errors in the summary instead of passing unnoticed.
local ids = {}
local position = 0
local headers = headers_with({ ["Content-Type"] = "application/json" })
local body = '{"decision": "approve"}'

function init(args)
  ids = read_share(args[1], tonumber(args[2]))
end

function request()
  position = position + 1
  local id = ids[(position - 1) % #ids + 1]
  return wrk.format("PATCH", wrk.path .. "/" .. id, headers, body)
end
