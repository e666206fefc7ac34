-- GET one of the seeded requests, picked at random. Args: ids file.
local ids

function init(args)
  ids = read_lines(args[1])
  math.randomseed(os.time() + thread_index * 7919)
end

function request()
  return wrk.format("GET", wrk.path .. "/" .. ids[math.random(#ids)])
end
