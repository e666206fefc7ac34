-- GET a page (default size 20) of the newest requests, picked at random. Args: page count.
local pages

function init(args)
  pages = tonumber(args[1])
  math.randomseed(os.time() + thread_index * 7919)
end

function request()
  return wrk.format("GET", wrk.path .. "?page=" .. math.random(pages))
end
