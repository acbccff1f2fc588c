# A real Rails router (ActionDispatch::Routing::RouteSet from Debian's
# ruby-actionpack) served by WEBrick, for gateway/frameworks_e2e_test.go.
# `post "/login"` routes "/login(.:format)", as in every Rails app.
# Usage: ruby rails_router.rb PORT (0: any); prints "listening PORT".
require "action_dispatch"
require "rack"
require "rack/handler/webrick"

hits = 0
lock = Mutex.new
login = lambda do |env|
  lock.synchronize { hits += 1 }
  fmt = env["action_dispatch.request.path_parameters"][:format]
  [200, {"Content-Type" => "text/plain"}, ["login path=#{env["PATH_INFO"]} format=#{fmt}\n"]]
end
routes = ActionDispatch::Routing::RouteSet.new
routes.draw do
  post "/login", to: login
  get "/hits", to: lambda { |_env| [200, {"Content-Type" => "text/plain"}, [lock.synchronize { hits }.to_s]] }
end
Rack::Handler::WEBrick.run(routes, Host: "127.0.0.1", Port: Integer(ARGV[0]), AccessLog: [],
                           Logger: WEBrick::Log.new($stderr, WEBrick::Log::WARN)) do |server|
  $stdout.puts "listening #{server.listeners.first.addr[1]}"
  $stdout.flush
end
