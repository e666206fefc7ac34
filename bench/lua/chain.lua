-- Whole approval chains, five calls each, every call answered before the next is sent:
-- create a sequential request, set its steps (one per approver), then each approver votes
-- their step in turn, the last vote approving the request.
-- Args: the requester's API key, then one "user_id:api_key" per approver, in step order.
--
-- run.py gives wrk one thread per connection: wrk tells a script neither which connection
-- an answer came on nor which call it answers, but a thread with one connection gets the
-- answers to its own calls, in order, so the next call can carry the ids they hold.
local requester
local approvers = {}
local create_body = '{"title": "Rotate the production database credentials", ' ..
  '"description": "Three people sign off, in order.", "priority": "high", ' ..
  '"is_sequential": true}'
local steps_body
local vote_body = '{"decision": "approve"}'

local stage = "create" -- the call to send next: create, steps or vote
local request_id
local step_ids = {}
local voter = 0 -- the approver whose vote is sent next, or was last sent
chains, failures = 0, 0 -- summed by done() over the threads

local function headers_for(key)
  return { ["Authorization"] = "Bearer " .. key, ["Content-Type"] = "application/json" }
end

function init(args)
  requester = args[1]
  local steps = {}
  for i = 2, #args do
    local user, key = args[i]:match("^([^:]+):(.+)$")
    approvers[#approvers + 1] = { user = user, key = key }
    steps[#steps + 1] = string.format('{"approver_id": "%s", "step_order": %d}', user, i - 1)
  end
  steps_body = '{"steps": [' .. table.concat(steps, ", ") .. ']}'
end

function request()
  if stage == "steps" then
    return wrk.format("POST", wrk.path .. "/" .. request_id .. "/steps",
      headers_for(requester), steps_body)
  elseif stage == "vote" then
    return wrk.format("PATCH", wrk.path .. "/" .. request_id .. "/steps/" .. step_ids[voter],
      headers_for(approvers[voter].key), vote_body)
  end
  return wrk.format("POST", wrk.path, headers_for(requester), create_body)
end

function response(status, headers, body)
  if status >= 300 then
    -- wrk counts it among its errors; the chain is abandoned and a new one begins.
    failures = failures + 1
    stage = "create"
  elseif stage == "create" then
    request_id = body:match('^{"id":"([%x%-]+)"')
    stage = "steps"
  elseif stage == "steps" then
    step_ids = {}
    for id in body:gmatch('{"id":"([%x%-]+)"') do
      step_ids[#step_ids + 1] = id
    end
    voter, stage = 1, "vote"
  elseif voter < #approvers then
    voter = voter + 1
  else
    if body:find('"request_status":"approved"', 1, true) then
      chains = chains + 1
    else
      failures = failures + 1
    end
    stage = "create"
  end
end

function done(summary, latency, requests)
  local total_chains, total_failures = 0, 0
  for _, thread in ipairs(threads) do
    total_chains = total_chains + thread:get("chains")
    total_failures = total_failures + thread:get("failures")
  end
  summarize(summary, latency, { chains = total_chains, failures = total_failures })
end
