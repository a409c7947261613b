package hindsight;

import java.nio.file.Path;
import java.util.Collections;
import java.util.List;
import org.opensearch.common.settings.Settings;
import org.opensearch.node.InternalSettingsPreparer;
import org.opensearch.node.Node;
import org.opensearch.transport.Netty4Plugin;

/**
 * One OpenSearch node, single-node discovery, HTTP on 127.0.0.1 only: the
 * server code of the distribution with its Netty HTTP transport, started
 * without the distribution's launcher scripts.
 * Usage: OpenSearchNode HOME PORT (data and logs go under HOME).
 */
public final class OpenSearchNode extends Node {
    private OpenSearchNode(Settings settings) {
        super(
            InternalSettingsPreparer.prepareEnvironment(settings, Collections.emptyMap(), null, () -> "hindsight-peer"),
            List.of(Netty4Plugin.class),
            true
        );
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: OpenSearchNode HOME PORT");
            System.exit(2);
        }
        Path home = Path.of(args[0]).toAbsolutePath();
        Settings settings = Settings.builder()
            .put("path.home", home.toString())
            .put("path.data", home.resolve("data").toString())
            .put("path.logs", home.resolve("logs").toString())
            .put("cluster.name", "hindsight-peer")
            .put("node.name", "hindsight-peer")
            .put("discovery.type", "single-node")
            .put("network.host", "127.0.0.1")
            .put("http.port", args[1])
            .put("http.type", "netty4")
            .put("transport.type", "netty4")
            // The benchmark bounds its own disk; the node's watermarks count the
            // whole shared filesystem and would block index creation on a
            // machine whose disk is mostly used by other work.
            .put("cluster.routing.allocation.disk.threshold_enabled", false)
            .build();
        Node node = new OpenSearchNode(settings);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                node.close();
            } catch (Exception e) {
                System.err.println("opensearch-node: close: " + e);
            }
        }));
        node.start();
        System.err.println("opensearch-node: listening on 127.0.0.1:" + args[1]);
        Thread.currentThread().join();
    }
}
