-- An OpenID CIBA poll: POST /oauth/token with the CIBA grant and the auth_req_id of one of
-- the pending backchannel requests, picked at random. Args: auth_req_ids file. Every answer
-- must be 400 authorization_pending; those are not errors here, anything else is.
local ids
local headers = headers_with({ ["Content-Type"] = "application/x-www-form-urlencoded" })
pending = 0
wrong = 0

function init(args)
  ids = read_lines(args[1])
  math.randomseed(os.time() + thread_index * 7919)
end

function request()
  local body = "grant_type=urn%3Aopenid%3Aparams%3Agrant-type%3Aciba&auth_req_id="
    .. ids[math.random(#ids)]
  return wrk.format("POST", wrk.path, headers, body)
end

function response(status, _, body)
  if status == 400 and string.find(body, "authorization_pending", 1, true) then
    pending = pending + 1
  else
    wrong = wrong + 1
  end
end

function done(summary, latency, requests)
  local answered, failures = 0, 0
  for _, thread in ipairs(threads) do
    answered = answered + thread:get("pending")
    failures = failures + thread:get("wrong")
  end
  -- The 400s wrk counts as status errors are the expected answers: not counted twice.
  summary.errors.status = summary.errors.status - answered
  summarize(summary, latency, { failures = failures })
end
