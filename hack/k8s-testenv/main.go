// Command k8s-testenv is one static binary that acts as etcd, kube-apiserver or
// kube-controller-manager (and kubectl, for people and scripts), so maasctl's tests run against a real control plane
// built only from Go modules. The component is chosen by the first argument or
// by the executable's base name (hyperkube style); one component per process.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	kcm "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	_ "time/tzdata"
)

func main() {
	name, args := filepath.Base(os.Args[0]), os.Args[1:]
	if strings.HasPrefix(name, "k8s-testenv") || name == "main" {
		if len(args) == 0 {
			usage()
		}
		name, args = args[0], args[1:]
	}
	var cmd *cobra.Command
	switch name {
	case "etcd":
		os.Exit(runEtcd(args))
	case "kube-apiserver":
		cmd = apiserver.NewAPIServerCommand()
	case "kube-controller-manager":
		cmd = kcm.NewControllerManagerCommand()
	case "kubectl":
		cmd = kubectl.NewDefaultKubectlCommand()
	case "version":
		fmt.Println(version)
		os.Exit(0)
	default:
		usage()
	}
	cmd.SetArgs(args)
	os.Exit(cli.Run(cmd))
}

const version = "k8s-testenv kubernetes v1.36.3 etcd v3.6.8"

func usage() {
	fmt.Fprintln(os.Stderr, "usage: k8s-testenv etcd|kube-apiserver|kube-controller-manager|kubectl|version [flags...]")
	os.Exit(2)
}
