-- POST a new approval request (also the echo baseline's body): five fields, a unique title.
local counter = 0
local priorities = { "low", "medium", "high", "critical" }
local headers = headers_with({ ["Content-Type"] = "application/json" })

function request()
  counter = counter + 1
  local body = string.format(
    '{"title": "Deploy build %d.%d to production", ' ..
    '"description": "Rolls out build %d.%d of the billing service to every region ' ..
    'once the canary has been healthy for ten minutes.", ' ..
    '"priority": "%s", "action_type": "deploy.production", "source": "bench"}',
    thread_index, counter, thread_index, counter, priorities[counter % 4 + 1])
  return wrk.format("POST", nil, headers, body)
end
