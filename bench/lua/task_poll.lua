-- tasks/get on the remote /mcp (protocol 2025-11-25, stateless): an MCP client polling
-- the task that is one of the seeded requests, picked at random. Args: ids file.
local ids
local headers = headers_with({
  ["Content-Type"] = "application/json",
  ["Accept"] = "application/json, text/event-stream",
  ["MCP-Protocol-Version"] = "2025-11-25",
})
local body = '{"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"taskId": "%s"}}'

function init(args)
  ids = read_lines(args[1])
  math.randomseed(os.time() + thread_index * 7919)
end

function request()
  return wrk.format("POST", wrk.path, headers, string.format(body, ids[math.random(#ids)]))
end
