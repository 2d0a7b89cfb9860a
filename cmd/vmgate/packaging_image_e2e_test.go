package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/vmgate/vmgate/internal/servertls/servertlstest"
	"github.com/vmgate/vmgate/internal/testkit"
)

// The container image of packaging/Containerfile as scripts/release.sh builds it
// (issue 19 item 9, docs/history.md): one OCI archive with an image for amd64 and
// one for arm64, each holding the binary of its architecture; the image of this
// machine's architecture started with buildah (`buildah from`, `buildah run`, the
// daemonless builder CI installs), as docs/deploy.md runs it with podman.

const deployDoc = "../../docs/deploy.md"

// imageArchive returns the OCI archive to test: $VMGATE_TEST_IMAGE_ARCHIVE, which
// CI's release step built (.ci/run: the image is built once), or else one built
// here by scripts/release.sh.
func imageArchive(t *testing.T) string {
	t.Helper()
	if a := os.Getenv("VMGATE_TEST_IMAGE_ARCHIVE"); a != "" {
		if _, err := os.Stat(a); err != nil {
			t.Fatalf("VMGATE_TEST_IMAGE_ARCHIVE: %v (did the release build fail?)", err)
		}
		return a
	}
	out := filepath.Join(t.TempDir(), "dist")
	cmd := exec.Command("bash", "../../scripts/release.sh", "test")
	cmd.Env = append(os.Environ(), "OUT="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/release.sh: %v\n%s", err, b)
	}
	return filepath.Join(out, "vmgate-test-image.oci.tar")
}

// ociImage is one platform's image in an OCI archive.
type ociImage struct {
	Architecture string
	Config       struct {
		User       string
		Env        []string
		Entrypoint []string
		Cmd        []string
		Volumes    map[string]struct{}
	} `json:"config"`
	// machine is the ELF machine of the image's /vmgate.
	machine elf.Machine
}

// readOCIArchive reads the images of every platform in an OCI archive (an image
// index, possibly nested, as `buildah manifest push --all` writes it).
func readOCIArchive(t *testing.T, path string) map[string]ociImage {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[strings.TrimPrefix(h.Name, "./")] = b
		}
	}
	type descriptor struct {
		MediaType string
		Digest    string
		Platform  *struct{ Architecture, OS string }
	}
	blob := func(d descriptor) []byte {
		algo, hash, _ := strings.Cut(d.Digest, ":")
		b, ok := files["blobs/"+algo+"/"+hash]
		if !ok {
			t.Fatalf("%s: no blob %s", path, d.Digest)
		}
		return b
	}
	decode := func(b []byte, v any) {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	var index struct{ Manifests []descriptor }
	decode(files["index.json"], &index)
	images := map[string]ociImage{}
	for len(index.Manifests) > 0 {
		d := index.Manifests[0]
		index.Manifests = index.Manifests[1:]
		if strings.HasSuffix(d.MediaType, "image.index.v1+json") {
			var nested struct{ Manifests []descriptor }
			decode(blob(d), &nested)
			index.Manifests = append(index.Manifests, nested.Manifests...)
			continue
		}
		var m struct {
			Config descriptor
			Layers []descriptor
		}
		decode(blob(d), &m)
		var img ociImage
		decode(blob(m.Config), &img)
		if d.Platform != nil && d.Platform.Architecture != img.Architecture {
			t.Errorf("%s: the index says %s, the image's config %s", path, d.Platform.Architecture, img.Architecture)
		}
		for _, l := range m.Layers {
			if mc, ok := layerELF(t, blob(l), strings.HasSuffix(l.MediaType, "gzip"), "vmgate"); ok {
				img.machine = mc
			}
		}
		images[img.Architecture] = img
	}
	return images
}

// layerELF returns the ELF machine of the file name in a layer's tar.
func layerELF(t *testing.T, layer []byte, gzipped bool, name string) (elf.Machine, bool) {
	t.Helper()
	var r io.Reader = bytes.NewReader(layer)
	if gzipped {
		zr, err := gzip.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return 0, false
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.Trim(h.Name, "./") != name {
			continue
		}
		head := make([]byte, 20)
		if _, err := io.ReadFull(tr, head); err != nil || !bytes.HasPrefix(head, []byte(elf.ELFMAG)) {
			t.Fatalf("the image's /%s is no ELF file (%v)", name, err)
		}
		return elf.Machine(uint16(head[18]) | uint16(head[19])<<8), true // e_machine; both are little-endian
	}
}

// TestContainerImage (issue 19 item 9, docs/history.md): the archive holds an image
// for linux/amd64 and one for linux/arm64, alike but for the binary, which is of
// the image's architecture; this machine's one, started with buildah, refuses to
// start without its TLS files, serves HTTPS with them mounted, takes its first
// admin from docs/deploy.md's one-liner on the same data volume, and serves plain
// HTTP only when docs/deploy.md's command for it says so.
func TestContainerImage(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("buildah"); err != nil {
		t.Skip("buildah is not installed: the container image is neither built nor started here (.ci/run installs Debian's buildah)")
	}
	if os.Geteuid() != 0 {
		t.Skip("not root: buildah run's chroot isolation and the volumes owned by the image's user need root (CI runs as root)")
	}
	archive := imageArchive(t)
	images := readOCIArchive(t, archive)
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	for arch, machine := range want {
		img, ok := images[arch]
		if !ok {
			t.Errorf("no image for linux/%s in %s", arch, archive)
			continue
		}
		if img.machine != machine {
			t.Errorf("the linux/%s image's /vmgate is for %v, want %v", arch, img.machine, machine)
		}
	}
	if len(images) != len(want) {
		t.Errorf("images for %d platforms, want amd64 and arm64", len(images))
	}
	if t.Failed() {
		t.FailNow()
	}
	amd, arm := images["amd64"], images["arm64"]
	amd.Architecture, arm.Architecture, amd.machine, arm.machine = "", "", 0, 0
	if a, b := fmt.Sprintf("%+v", amd), fmt.Sprintf("%+v", arm); a != b {
		t.Fatalf("the images differ beyond the binary:\namd64 %s\narm64 %s", a, b)
	}
	img, ok := images[runtime.GOARCH]
	if !ok {
		t.Skipf("no image for this machine's %s to start", runtime.GOARCH)
	}
	if img.Config.User != "65532:65532" || len(img.Config.Entrypoint) == 0 {
		t.Fatalf("image config: user %q, entrypoint %q: want a non-root user and vmgate as the entrypoint", img.Config.User, img.Config.Entrypoint)
	}
	if _, ok := img.Config.Volumes["/data"]; !ok {
		t.Fatalf("the image declares no /data volume: %v", img.Config.Volumes)
	}

	// The container from the archive, in storage of the test's own (vfs).
	storage := t.TempDir()
	// A guard against a hang of the whole walk, not a speed goal.
	ctx, cancel := context.WithTimeout(context.Background(), 5*testkit.Deadline)
	defer cancel()
	buildah := func(ctx context.Context, args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, "buildah", append([]string{"--storage-driver", "vfs",
			"--root", filepath.Join(storage, "root"), "--runroot", filepath.Join(storage, "run")}, args...)...)
	}
	from := buildah(ctx, "from", "--arch", runtime.GOARCH, "--name", "vmgate-image-test", "--quiet", "oci-archive:"+archive)
	if out, err := from.CombinedOutput(); err != nil {
		t.Fatalf("buildah from: %v\n%s", err, out)
	}
	t.Cleanup(func() { buildah(context.Background(), "rm", "vmgate-image-test").Run() })
	// buildah run gives a VOLUME of the image a fresh volume on each run, which a -v
	// on the same path does not replace (podman run's -v does): the test's working
	// container drops the declaration, so its -v is the data volume.
	if out, err := buildah(ctx, "config", "--volume", "/data-", "vmgate-image-test").CombinedOutput(); err != nil {
		t.Fatalf("buildah config: %v\n%s", err, out)
	}

	// The volumes: a data volume as the image's /data makes a new named volume
	// (owned by the image's user), and the TLS files, the key readable by that user
	// as docs/deploy.md says.
	data := filepath.Join(t.TempDir(), "data")
	tlsDir := filepath.Join(t.TempDir(), "tls")
	pair := servertlstest.Write(t, t.TempDir(), "vmgate", "vmgate image test")
	installFile(t, pair.CertFile, filepath.Join(tlsDir, "cert.pem"), 0o644)
	installFile(t, pair.KeyFile, filepath.Join(tlsDir, "key.pem"), 0o400)
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{data, filepath.Join(tlsDir, "key.pem")} {
		if err := os.Chown(p, 65532, 65532); err != nil {
			t.Fatal(err)
		}
	}
	// run runs command in the container as `podman run -v data:/data OPTS IMAGE
	// COMMAND` would: after the image's entrypoint, with the image's user.
	run := func(ctx context.Context, stdin io.Reader, opts []string, command []string) *exec.Cmd {
		args := append([]string{"run", "--isolation", "chroot", "-v", data + ":/data"}, opts...)
		args = append(args, "vmgate-image-test", "--")
		cmd := buildah(ctx, append(append(args, img.Config.Entrypoint...), command...)...)
		cmd.Stdin = stdin
		return cmd
	}

	// Without its TLS files the default command refuses to start, naming the file.
	out, err := run(ctx, nil, nil, img.Config.Cmd).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "/etc/vmgate/tls/cert.pem") {
		t.Fatalf("the default command without /etc/vmgate/tls: %v, want a refusal naming cert.pem:\n%s", err, out)
	}

	// With them it serves HTTPS (on a free port: -e VMGATE_LISTEN, as `podman run -e`).
	p := startCmd(t, run(context.Background(), nil, []string{"-e", "VMGATE_LISTEN=0.0.0.0:0", "-v", tlsDir + ":/etc/vmgate/tls:ro"}, img.Config.Cmd))
	base := p.line(t, listening)[1]
	if !strings.HasPrefix(base, "https://") {
		t.Fatalf("the image's default command listens on %s, want https://", base)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pair.Pool}}}
	base = localBase(t, base)
	checkReady(t, client, base)

	// docs/deploy.md's one-liner for the first admin, on the same data volume.
	const pw = "image first admin pass"
	admin := documentedPodmanRun(t, "admin user create")
	at := slices.Index(admin, "--email")
	if at < 0 || at+1 == len(admin) || !slices.Contains(admin, "--password-stdin") {
		t.Fatalf("docs/deploy.md's first admin %q names no --email or no --password-stdin", admin)
	}
	email := admin[at+1]
	if b, err := run(ctx, strings.NewReader(pw+"\n"), nil, admin).CombinedOutput(); err != nil {
		t.Fatalf("the documented first admin: %v\n%s", err, b)
	}
	c := checkedClientVia(t, base, "", client.Transport.(*http.Transport))
	if _, err := c.Login(ctx, email, pw); err != nil {
		t.Fatalf("log in as the image's first admin %s: %v\n%s", email, err, p.log())
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	waitOrKill(p.cmd, testkit.Deadline)

	// Plain HTTP, when docs/deploy.md's command asks for it.
	plain := startCmd(t, run(context.Background(), nil, []string{"-e", "VMGATE_LISTEN=0.0.0.0:0"}, documentedPodmanRun(t, "--plain-http")))
	base = plain.line(t, listening)[1]
	if !strings.HasPrefix(base, "http://") {
		t.Fatalf("docs/deploy.md's plain HTTP command listens on %s, want http://", base)
	}
	checkReady(t, http.DefaultClient, localBase(t, base))
}

// localBase is the loopback address of a server listening on every interface.
func localBase(t *testing.T, base string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	return u.Scheme + "://127.0.0.1:" + u.Port()
}

// podmanRun is a `podman run … vmgate:VERSION COMMAND…` line of docs/deploy.md.
var podmanRun = regexp.MustCompile(`^\s*podman run .* vmgate:VERSION (.+)$`)

// documentedPodmanRun returns the command after the image of the one line of
// docs/deploy.md that runs the image with a command containing what, after checking
// that it mounts the data volume the documented server uses.
func documentedPodmanRun(t *testing.T, what string) []string {
	t.Helper()
	b, err := os.ReadFile(deployDoc)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, line := range strings.Split(string(b), "\n") {
		m := podmanRun.FindStringSubmatch(line)
		if m == nil || !strings.Contains(m[1], what) {
			continue
		}
		if !strings.Contains(line, " -v vmgate-data:/data ") {
			t.Fatalf("docs/deploy.md: %q does not mount the data volume vmgate-data at /data", line)
		}
		words, err := splitWords(m[1])
		if err != nil {
			t.Fatal(err)
		}
		found = append(found, strings.Join(words, "\x00"))
	}
	if len(found) != 1 {
		t.Fatalf("docs/deploy.md has %d one-line `podman run … vmgate:VERSION …%s…` commands, want 1", len(found), what)
	}
	return strings.Split(found[0], "\x00")
}
