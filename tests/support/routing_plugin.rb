# Runs origin-server's ActiveMQ routing plugin as the broker (the Rails application)
# would, for tests (`tests/support/activemq/plugin.rs` starts it).
#
#   ruby routing_plugin.rb DIR
#
# DIR holds origin-server's `routing_service.rb` (controller/lib/openshift/) and
# `activemq_routing_plugin.rb` (plugins/routing/activemq/lib/openshift/), unchanged.
# The environment variable ROUTING_ACTIVEMQ holds, as JSON, what the plugin's Rails
# initializer would have put in `Rails.application.config.routing_activemq`:
# {"destination": "/topic/routinginfo", "hosts": [{"host": "127.0.0.1", "port": "61613"}],
#  "username": "routinginfo", "password": "routinginfopasswd"}.
#
# Reads one JSON command per line on stdin, {"op": ..., "app": ..., "namespace": ...,
# ...}, calls the matching `OpenShift::RoutingService.notify_*` (which hands it to every
# registered provider: here the ActiveMQ plugin, registered as its Rails engine does),
# and answers one line: `ok`, or `error <class>: <message>`.

require 'json'
require 'logger'
require 'yaml'

# Stand-ins for what the plugin uses of Rails: its logger and its configuration.
module Rails
  Config = Struct.new(:routing_activemq)
  Application = Struct.new(:config)

  def self.logger
    @logger ||= Logger.new($stderr).tap { |l| l.level = Logger::WARN }
  end

  def self.application
    @application ||= Application.new(Config.new(nil))
  end
end

conf = JSON.parse(ENV.fetch('ROUTING_ACTIVEMQ'))
Rails.application.config.routing_activemq = {
  :destination => conf.fetch('destination'),
  :hosts => conf.fetch('hosts').map { |h| { :host => h.fetch('host'), :port => h.fetch('port') } },
  :username => conf.fetch('username'),
  :password => conf.fetch('password'),
  :debug => false,
  :mcollective_conf => nil,
}

dir = ARGV.fetch(0)
require File.join(dir, 'routing_service.rb')
require File.join(dir, 'activemq_routing_plugin.rb')

# As `OpenShift::ActiveMQRoutingEngine` does after Rails' initialization.
OpenShift::RoutingService.register_provider OpenShift::ActiveMQPlugin.new

# The application and gear objects the broker passes (Mongoid documents there): only
# what the plugin reads.
Domain = Struct.new(:namespace)
App = Struct.new(:name, :domain_namespace, :domain, :scalable, :ha)
Gear = Struct.new(:_id)

def app_of(c)
  ns = c.fetch('namespace')
  App.new(c.fetch('app'), ns, Domain.new(ns), c.fetch('scalable', false), c.fetch('ha', false))
end

def run(c)
  rs = OpenShift::RoutingService
  app = app_of(c)
  case c.fetch('op')
  when 'create_application'
    rs.notify_create_application(app)
  when 'delete_application'
    rs.notify_delete_application(app)
  when 'add_public_endpoint'
    rs.notify_create_public_endpoint(app, Gear.new(c.fetch('gear_id')), c.fetch('public_port_name'),
                                     c.fetch('public_address'), c.fetch('public_port'),
                                     c['internal_address'], c['internal_port'],
                                     c.fetch('protocols'), c.fetch('types'), c.fetch('mappings'))
  when 'remove_public_endpoint'
    rs.notify_delete_public_endpoint(app, Gear.new(c.fetch('gear_id')), c.fetch('public_address'),
                                     c.fetch('public_port'))
  when 'add_alias'
    rs.notify_add_alias(app, c.fetch('alias'))
  when 'remove_alias'
    rs.notify_remove_alias(app, c.fetch('alias'))
  when 'add_ssl'
    rs.notify_ssl_cert_add(app, c.fetch('alias'), c.fetch('ssl'), c.fetch('private_key'),
                           c.fetch('pass_phrase'))
  when 'remove_ssl'
    rs.notify_ssl_cert_remove(app, c.fetch('alias'))
  else
    raise ArgumentError, "unknown op #{c['op'].inspect}"
  end
end

$stdout.sync = true
$stdin.each_line do |line|
  begin
    run(JSON.parse(line))
    puts 'ok'
  rescue StandardError, ScriptError => e
    puts "error #{e.class}: #{e.message.gsub("\n", ' ')}"
  end
end
