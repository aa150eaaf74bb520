// Command kube-router-netpol: kube-router's NetworkPolicy controller and nothing else of kube-router,
// for the dev stack's real node (lagpilot_dev/netpol.py; docs/node.md "NetworkPolicy").
//
// The stack ran kube-router's own binary with --run-firewall only; that binary links its router
// (GoBGP), service proxy (IPVS, Docker's client) and the AWS SDK whatever runs, 46 MB of Go source and
// ~41 min of cold build on 2 loaded cores. This main links only the policy controller's packages
// (pkg/controllers/netpol and its health and metrics packages: client-go, netlink, go-iptables), so
// the agent's cold build is small enough for the default path. The policy logic is kube-router's,
// unchanged (the module below pins its release); this file only wires it: kube-router's own flags,
// the informers the controller needs, its health server, and SIGTERM.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/cloudnativelabs/kube-router/v2/pkg/controllers/netpol"
	"github.com/cloudnativelabs/kube-router/v2/pkg/healthcheck"
	"github.com/cloudnativelabs/kube-router/v2/pkg/options"
	"github.com/spf13/pflag"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "kube-router-netpol: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	config := options.NewKubeRouterConfig()
	config.AddFlags(pflag.CommandLine)
	pflag.Parse()
	var level klog.Level
	if err := level.Set(config.VLevel); err != nil {
		return fmt.Errorf("--v=%q: %w", config.VLevel, err)
	}
	if !config.RunFirewall || config.RunRouter || config.RunServiceProxy || config.RunLoadBalancer {
		return errors.New("this build runs the NetworkPolicy controller only: " +
			"--run-firewall=true --run-router=false --run-service-proxy=false --run-loadbalancer=false")
	}
	if config.Kubeconfig == "" && config.Master == "" {
		return errors.New("--kubeconfig (or --master) is required")
	}
	if os.Geteuid() != 0 {
		return errors.New("needs root: it programs iptables and ipset")
	}
	rest, err := clientcmd.BuildConfigFromFlags(config.Master, config.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(rest)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	heartbeats := make(chan *healthcheck.ControllerHeartbeat, 10)

	health, err := healthcheck.NewHealthController(config)
	if err != nil {
		return fmt.Errorf("health controller: %w", err)
	}
	wg.Add(1)
	go health.RunServer(stop, &wg)

	factory := informers.NewSharedInformerFactory(client, 0)
	pods := factory.Core().V1().Pods().Informer()
	namespaces := factory.Core().V1().Namespaces().Informer()
	policies := factory.Networking().V1().NetworkPolicies().Informer()
	factory.Start(stop)
	synced := make(chan struct{})
	go func() { factory.WaitForCacheSync(stop); close(synced) }()
	select {
	case <-synced:
	case <-time.After(config.CacheSyncTimeout):
		return fmt.Errorf("informer caches not synced within %s", config.CacheSyncTimeout)
	}

	health.SetAlive()
	wg.Add(1)
	go health.RunCheck(heartbeats, stop, &wg)

	var ipsetMutex sync.Mutex
	iptables, ipsets, err := netpol.NewIPTablesHandlers(config)
	if err != nil {
		return fmt.Errorf("iptables handlers: %w", err)
	}
	npc, err := netpol.NewNetworkPolicyController(client, config, pods, policies, namespaces,
		&ipsetMutex, iptables, ipsets)
	if err != nil {
		return fmt.Errorf("network policy controller: %w", err)
	}
	for what, add := range map[string]func() error{
		"pods":       func() error { _, e := pods.AddEventHandler(npc.PodEventHandler); return e },
		"namespaces": func() error { _, e := namespaces.AddEventHandler(npc.NamespaceEventHandler); return e },
		"policies":   func() error { _, e := policies.AddEventHandler(npc.NetworkPolicyEventHandler); return e },
	} {
		if err := add(); err != nil {
			return fmt.Errorf("%s event handler: %w", what, err)
		}
	}
	wg.Add(1)
	go npc.Run(heartbeats, stop, &wg)

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	<-signals
	klog.Info("shutting down the NetworkPolicy controller")
	close(stop)
	wg.Wait()
	return nil
}
